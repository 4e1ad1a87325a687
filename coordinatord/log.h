/*
 * log: one line per event to stderr (journald under systemd).
 *
 * Each line reads "2025-01-02T03:04:05.123456Z LEVEL ringmasterd: message".
 * The level is set once at start, before any thread is created; log_enabled()
 * is cheap so hot paths can skip formatting entirely.
 */
#ifndef RINGMASTER_COORDINATORD_LOG_H
#define RINGMASTER_COORDINATORD_LOG_H

#include <stdbool.h>

typedef enum {
	LOG_ERROR = 0,
	LOG_WARN,
	LOG_INFO,
	LOG_DEBUG,
} log_level_t;

/* Parse "error", "warn", "info", "debug"; 0 and *ret_level, or -EINVAL. */
int log_level_parse(const char *name, log_level_t *ret_level);
const char *log_level_name(log_level_t level);

/* Set the threshold; call before starting threads. */
void log_set_level(log_level_t level);
bool log_enabled(log_level_t level);

/* Write one line if `level` is enabled. Thread-safe (one write(2) per line). */
void log_msg(log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif
