/*
 * table: aligned text tables for ringctl's default output. Rows are added as
 * strings; widths are computed from the data when the table is printed, so a
 * column is as wide as its widest cell. Cells are made safe for a terminal
 * (C0 control characters become '?'; C1 controls and the bidirectional
 * controls are shown escaped, \u202e) because job names are stored exactly
 * as users sent them.
 */
#ifndef RINGCTL_TABLE_H
#define RINGCTL_TABLE_H

#include <stddef.h>
#include <stdio.h>

typedef struct table table_t;

/*
 * Makes a table with n_cols columns titled by headers[0..n_cols-1] (copied).
 * Returns NULL when out of memory or when n_cols is 0.
 */
table_t *table_new(size_t n_cols, const char *const *headers);

/* Frees the table; NULL is fine. */
void table_free(table_t *table);

/*
 * Cuts cells of column col longer than max_chars characters to max_chars,
 * the last three being "...". 0 (the default) means no limit.
 */
void table_set_max_width(table_t *table, size_t col, size_t max_chars);

/*
 * Appends a row of n_cols cells (copied; NULL prints as "-").
 * Returns 0, or -ENOMEM.
 */
int table_add_row(table_t *table, const char *const *cells);

/* Number of rows added so far (the header not counted). */
size_t table_n_rows(const table_t *table);

/*
 * Prints the header and the rows to out, columns separated by two spaces,
 * no trailing blanks. Width counts UTF-8 characters, not bytes.
 */
void table_print(const table_t *table, FILE *out);

/*
 * Copies s into a new string safe to print on a terminal: each C0 control
 * character and DEL becomes '?', each C1 control (U+0080-U+009F),
 * bidirectional control (U+202A-U+202E, U+2066-U+2069, U+200E/F, U+061C)
 * and line or paragraph separator (U+2028/9) is written escaped as
 * \uXXXX, each byte that is not valid UTF-8 becomes '?'; then, when max_chars > 3 and the result is longer than
 * max_chars characters, it is cut to max_chars characters ending in "...".
 * Returns NULL when out of memory; the caller frees the result.
 */
char *table_sanitize(const char *s, size_t max_chars);

/* Number of UTF-8 characters in s (continuation bytes are not counted). */
size_t table_display_width(const char *s);

#endif
