/*
 * table: see table.h. Cells are stored sanitized, in one growing array of
 * rows, each row an array of n_cols strings; row 0 is the header.
 */
#include "table.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
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

/* The code point of the UTF-8 sequence at p and its length (1..4), or 0
 * when the bytes there are not a valid, shortest sequence. */
static size_t s_utf8_decode(const unsigned char *p, uint32_t *ret_cp)
{
	uint32_t cp;
	size_t n;
	if (p[0] < 0x80)
		return *ret_cp = p[0], 1;
	if ((p[0] & 0xE0) == 0xC0)
		cp = p[0] & 0x1F, n = 2;
	else if ((p[0] & 0xF0) == 0xE0)
		cp = p[0] & 0x0F, n = 3;
	else if ((p[0] & 0xF8) == 0xF0)
		cp = p[0] & 0x07, n = 4;
	else
		return 0;
	for (size_t i = 1; i < n; i++) {
		if (!is_continuation(p[i])) /* also stops at the terminating NUL */
			return 0;
		cp = cp << 6 | (p[i] & 0x3F);
	}
	static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
	if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	*ret_cp = cp;
	return n;
}

/* Code points a terminal acts on instead of showing: C0 and C1 controls,
 * DEL, the bidirectional embeddings, overrides, isolates and marks (which
 * make "evil\u202egnp.exe" show as "evilexe.png": CVE-2021-42574's Trojan
 * Source) and the line and paragraph separators. */
static bool s_unsafe(uint32_t cp)
{
	return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F) || cp == 0x061C || cp == 0x200E ||
	       cp == 0x200F || (cp >= 0x2028 && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

/* s with every unsafe code point written as \uXXXX and every byte that is
 * not valid UTF-8 as '?'. malloc'ed, NULL when out of memory. */
static char *s_escape(const char *s)
{
	size_t len = strlen(s);
	char *out = malloc(6 * len + 1), *o = out;
	if (!out)
		return NULL;
	for (const unsigned char *p = (const unsigned char *)s; *p;) {
		uint32_t cp = 0;
		size_t n = s_utf8_decode(p, &cp);
		if (n == 0) {
			*o++ = '?';
			p++;
		} else if (cp < 0x20 || cp == 0x7F) {
			*o++ = '?'; /* C0 and DEL: '?' as ever (newlines, tabs, ESC in names and logs) */
			p++;
		} else if (s_unsafe(cp)) {
			o += sprintf(o, "\\u%04" PRIx32, cp);
			p += n;
		} else {
			memcpy(o, p, n);
			o += n;
			p += n;
		}
	}
	*o = '\0';
	return out;
}

char *table_sanitize(const char *raw, size_t max_chars)
{
	char *s = s_escape(raw);
	if (!s)
		return NULL;
	size_t n_bytes = strlen(s);
	size_t n_chars = table_display_width(s);
	int cut = max_chars > 3 && n_chars > max_chars;
	if (!cut)
		return s;
	/* Keep max_chars - 3 whole characters. */
	size_t chars = 0, keep_bytes = 0;
	while (keep_bytes < n_bytes) {
		if (!is_continuation((unsigned char)s[keep_bytes])) {
			if (chars == max_chars - 3)
				break;
			chars++;
		}
		keep_bytes++;
	}
	memcpy(s + keep_bytes, "...", 4); /* fits: the cut removed at least 4 bytes */
	return s;
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
