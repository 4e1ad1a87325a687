/*
 * tls: the certificate and private key ringmasterd serves HTTPS with
 * (--tls-cert, --tls-key; config.h).
 *
 * Both files are PEM, read once at start into memory for libmicrohttpd
 * (MHD_OPTION_HTTPS_MEM_CERT / _KEY) and checked with GnuTLS first, so that
 * a wrong file is refused with a message naming it and saying what is wrong
 * (unreadable, not a PEM certificate, not a PEM private key, a key that does
 * not belong to the certificate) rather than libmicrohttpd's "failed to
 * start". A key file readable by group or others is warned about at every
 * start. Errors never quote the files' contents.
 */
#ifndef RINGMASTER_COORDINATORD_TLS_H
#define RINGMASTER_COORDINATORD_TLS_H

#include <stddef.h>

typedef struct {
	char *cert_pem; /* NUL-terminated */
	char *key_pem;  /* NUL-terminated; wiped by tls_files_clear */
} tls_files_t;

/*
 * Read and check `cert_path` and `key_path` into *ret (owned by the caller:
 * tls_files_clear). Returns 0, or a negative errno with one line in `err`
 * naming the file at fault ("cannot read --tls-key /x.key: Permission
 * denied", "--tls-cert /x.crt holds no PEM certificate (...)").
 */
int tls_files_load(const char *cert_path, const char *key_path, tls_files_t *ret, char *err, size_t errlen);

/* Wipe the key and free both; accepts a zeroed struct. */
void tls_files_clear(tls_files_t *f);

#endif
