/*
 * log: stderr logging (see log.h). A line is formatted into a stack buffer
 * and written with one write(2), so lines from different threads never
 * interleave.
 */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static log_level_t s_level = LOG_INFO;
static const char *const s_names[] = {"error", "warn", "info", "debug"};

int log_level_parse(const char *name, log_level_t *ret_level)
{
	for (int i = 0; i <= LOG_DEBUG; i++) {
		if (strcmp(name, s_names[i]) == 0) {
			*ret_level = (log_level_t)i;
			return 0;
		}
	}
	return -EINVAL;
}

const char *log_level_name(log_level_t level)
{
	return (level >= LOG_ERROR && level <= LOG_DEBUG) ? s_names[level] : "?";
}

void log_set_level(log_level_t level)
{
	s_level = level;
}

bool log_enabled(log_level_t level)
{
	return level <= s_level;
}

void log_msg(log_level_t level, const char *fmt, ...)
{
	if (!log_enabled(level))
		return;
	char line[2048];
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ %s ringmasterd: ",
	                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
	                 tm.tm_sec, ts.tv_nsec / 1000, log_level_name(level));
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
	va_end(ap);
	size_t len = (size_t)n + (m < 0 ? 0 : ((size_t)m < sizeof line - (size_t)n - 1 ? (size_t)m : sizeof line - (size_t)n - 2));
	line[len++] = '\n';
	ssize_t w = write(STDERR_FILENO, line, len);
	(void)w;
}
