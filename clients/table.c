/*
 * table: see table.h. Cells are stored sanitized, in one growing array of
 * rows, each row an array of n_cols strings; row 0 is the header.
 */
#include "table.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct table {
	size_t n_cols;
	size_t n_rows; /* including the header */
	size_t cap_rows;
	char ***rows;
	size_t *max_chars; /* per column; 0 = no limit */
};

static int is_continuation(unsigned char c)
{
	return (c & 0xC0) == 0x80;
}

size_t table_display_width(const char *s)
{
	size_t n = 0;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if (!is_continuation(*p))
			n++;
	return n;
}

char *table_sanitize(const char *s, size_t max_chars)
{
	size_t n_bytes = strlen(s);
	size_t n_chars = table_display_width(s);
	size_t keep_bytes = n_bytes;
	int cut = max_chars > 3 && n_chars > max_chars;
	if (cut) {
		/* Keep max_chars - 3 whole characters. */
		size_t chars = 0;
		keep_bytes = 0;
		while (keep_bytes < n_bytes) {
			if (!is_continuation((unsigned char)s[keep_bytes])) {
				if (chars == max_chars - 3)
					break;
				chars++;
			}
			keep_bytes++;
		}
	}
	char *out = malloc(keep_bytes + (cut ? 3 : 0) + 1);
	if (!out)
		return NULL;
	for (size_t i = 0; i < keep_bytes; i++) {
		unsigned char c = (unsigned char)s[i];
		out[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
	}
	if (cut)
		memcpy(out + keep_bytes, "...", 3);
	out[keep_bytes + (cut ? 3 : 0)] = '\0';
	return out;
}

static void free_row(char **row, size_t n_cols)
{
	if (!row)
		return;
	for (size_t i = 0; i < n_cols; i++)
		free(row[i]);
	free(row);
}

void table_free(table_t *table)
{
	if (!table)
		return;
	for (size_t r = 0; r < table->n_rows; r++)
		free_row(table->rows[r], table->n_cols);
	free(table->rows);
	free(table->max_chars);
	free(table);
}

static int append_row(table_t *table, const char *const *cells, int limit)
{
	if (table->n_rows == table->cap_rows) {
		size_t cap = table->cap_rows ? table->cap_rows * 2 : 16;
		char ***rows = realloc(table->rows, cap * sizeof *rows);
		if (!rows)
			return -ENOMEM;
		table->rows = rows;
		table->cap_rows = cap;
	}
	char **row = calloc(table->n_cols, sizeof *row);
	if (!row)
		return -ENOMEM;
	for (size_t i = 0; i < table->n_cols; i++) {
		row[i] = table_sanitize(cells[i] ? cells[i] : "-", limit ? table->max_chars[i] : 0);
		if (!row[i]) {
			free_row(row, table->n_cols);
			return -ENOMEM;
		}
	}
	table->rows[table->n_rows++] = row;
	return 0;
}

table_t *table_new(size_t n_cols, const char *const *headers)
{
	if (n_cols == 0)
		return NULL;
	table_t *table = calloc(1, sizeof *table);
	if (!table)
		return NULL;
	table->n_cols = n_cols;
	table->max_chars = calloc(n_cols, sizeof *table->max_chars);
	if (!table->max_chars || append_row(table, headers, 0) < 0) {
		table_free(table);
		return NULL;
	}
	return table;
}

void table_set_max_width(table_t *table, size_t col, size_t max_chars)
{
	if (col < table->n_cols)
		table->max_chars[col] = max_chars;
}

int table_add_row(table_t *table, const char *const *cells)
{
	return append_row(table, cells, 1);
}

size_t table_n_rows(const table_t *table)
{
	return table->n_rows - 1;
}

void table_print(const table_t *table, FILE *out)
{
	size_t *widths = calloc(table->n_cols, sizeof *widths);
	if (!widths)
		return;
	for (size_t r = 0; r < table->n_rows; r++)
		for (size_t c = 0; c < table->n_cols; c++) {
			size_t w = table_display_width(table->rows[r][c]);
			if (w > widths[c])
				widths[c] = w;
		}
	for (size_t r = 0; r < table->n_rows; r++) {
		for (size_t c = 0; c < table->n_cols; c++) {
			const char *cell = table->rows[r][c];
			fputs(cell, out);
			if (c + 1 < table->n_cols) {
				size_t pad = widths[c] - table_display_width(cell) + 2;
				for (size_t i = 0; i < pad; i++)
					fputc(' ', out);
			}
		}
		fputc('\n', out);
	}
	free(widths);
}
