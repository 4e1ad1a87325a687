/*
 * ctlconf: where ringctl finds its server and its API token.
 *
 * In order, the first that gives a value wins:
 *   server: --server, $RINGMASTER_SERVER, the config file's `server`, the
 *           default http://127.0.0.1:8080;
 *   token:  --token, $RINGMASTER_TOKEN, the config file's `token`, then
 *           ./state/admin.token (the daemon's default database folder,
 *           ringmasterd's --db ./state/ringmaster.db) when it is readable, so
 *           that ringctl run by the daemon's user where the daemon runs finds
 *           the first admin token.
 * The config file is $XDG_CONFIG_HOME/ringmaster/ringctl.conf (default
 * ~/.config/ringmaster/ringctl.conf), or $RINGCTL_CONFIG: lines `key =
 * value` with keys server, token and cacert; `#` starts a comment; a
 * [section] line is ignored. An unknown key or a line without `=` is an
 * error naming the file and line.
 */
#ifndef RINGCTL_CTLCONF_H
#define RINGCTL_CTLCONF_H

#include <stddef.h>

#define CTLCONF_DEFAULT_ADMIN_TOKEN "./state/admin.token"

typedef struct {
	char path[4096];    /* the file read ("" when none) */
	char server[1024];  /* "" when the file has none */
	char token[256];
	char cacert[4096];
} ctlconf_t;

/*
 * Read the config file into *ret (zeroed first). A missing file is not an
 * error. 0, or -1 with one line in `err` (a bad line, an unknown key, a
 * file that cannot be read).
 */
int ctlconf_load(ctlconf_t *ret, char *err, size_t errlen);

/*
 * The first line of a token file at `path` into `out` (surrounding blanks
 * removed). 0, or -1 when it cannot be read or is empty.
 */
int ctlconf_read_token_file(const char *path, char *out, size_t outlen);

#endif
