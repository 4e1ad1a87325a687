/*
 * tls: load and check the HTTPS certificate and key (see tls.h). GnuTLS is
 * the library libmicrohttpd itself serves TLS with, so what passes here is
 * what libmicrohttpd accepts.
 */
#include "tls.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <sodium.h>

#include "log.h"

#define TLS_FILE_MAX_BYTES (1 << 20)

/* Read a whole PEM file (at most 1 MiB) into a NUL-terminated buffer. */
static int read_pem(const char *what, const char *path, char **ret, size_t *ret_len, struct stat *ret_st, char *err,
                    size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		snprintf(err, errlen, "cannot read %s %s: %s", what, path, strerror(e));
		return -e;
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > TLS_FILE_MAX_BYTES) {
		snprintf(err, errlen, "cannot use %s %s: not a regular file of at most 1 MiB", what, path);
		close(fd);
		return -EINVAL;
	}
	size_t n = (size_t)st.st_size;
	char *buf = malloc(n + 1);
	if (!buf) {
		close(fd);
		snprintf(err, errlen, "out of memory reading %s %s", what, path);
		return -ENOMEM;
	}
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, buf + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			int e = r < 0 ? errno : EIO;
			snprintf(err, errlen, "cannot read %s %s: %s", what, path, strerror(e));
			sodium_memzero(buf, n);
			free(buf);
			close(fd);
			return -e;
		}
		got += (size_t)r;
	}
	close(fd);
	buf[n] = '\0';
	*ret = buf;
	*ret_len = n;
	*ret_st = st;
	return 0;
}

/* The certificate chain parses; warn when the first has expired. */
static int check_cert(const char *path, const gnutls_datum_t *pem, char *err, size_t errlen)
{
	gnutls_x509_crt_t *crts = NULL;
	unsigned n = 0;
	int r = gnutls_x509_crt_list_import2(&crts, &n, pem, GNUTLS_X509_FMT_PEM, 0);
	if (r < 0 || n == 0) {
		snprintf(err, errlen, "--tls-cert %s holds no PEM certificate (%s); expected a file starting with "
		         "-----BEGIN CERTIFICATE-----", path, r < 0 ? gnutls_strerror(r) : "none found");
		return -EINVAL;
	}
	time_t expires = gnutls_x509_crt_get_expiration_time(crts[0]);
	if (expires != (time_t)-1 && expires < time(NULL))
		log_warn("tls: the certificate in %s has expired; clients will refuse it", path);
	for (unsigned i = 0; i < n; i++)
		gnutls_x509_crt_deinit(crts[i]);
	gnutls_free(crts);
	return 0;
}

static int check_key(const char *path, const gnutls_datum_t *pem, char *err, size_t errlen)
{
	gnutls_x509_privkey_t key;
	if (gnutls_x509_privkey_init(&key) < 0) {
		snprintf(err, errlen, "out of memory checking --tls-key %s", path);
		return -ENOMEM;
	}
	int r = gnutls_x509_privkey_import2(key, pem, GNUTLS_X509_FMT_PEM, NULL, 0);
	gnutls_x509_privkey_deinit(key);
	if (r < 0) {
		snprintf(err, errlen, "--tls-key %s holds no usable PEM private key (%s); an unencrypted key is "
		         "expected (-----BEGIN PRIVATE KEY-----)", path, gnutls_strerror(r));
		return -EINVAL;
	}
	return 0;
}

/* The key belongs to the certificate. */
static int check_pair(const char *cert_path, const char *key_path, const gnutls_datum_t *cert,
                      const gnutls_datum_t *key, char *err, size_t errlen)
{
	gnutls_certificate_credentials_t cred;
	if (gnutls_certificate_allocate_credentials(&cred) < 0) {
		snprintf(err, errlen, "out of memory checking the TLS certificate");
		return -ENOMEM;
	}
	int r = gnutls_certificate_set_x509_key_mem2(cred, cert, key, GNUTLS_X509_FMT_PEM, NULL, 0);
	gnutls_certificate_free_credentials(cred);
	if (r < 0) {
		snprintf(err, errlen, "--tls-key %s cannot be used with --tls-cert %s: %s", key_path, cert_path,
		         gnutls_strerror(r));
		return -EINVAL;
	}
	return 0;
}

int tls_files_load(const char *cert_path, const char *key_path, tls_files_t *ret, char *err, size_t errlen)
{
	tls_files_t f = {0};
	size_t cert_len, key_len;
	struct stat cert_st, key_st;
	int r = read_pem("--tls-cert", cert_path, &f.cert_pem, &cert_len, &cert_st, err, errlen);
	if (r < 0)
		return r;
	r = read_pem("--tls-key", key_path, &f.key_pem, &key_len, &key_st, err, errlen);
	if (r < 0)
		goto fail;
	if (key_st.st_mode & (S_IRWXG | S_IRWXO))
		log_warn("tls: the private key %s can be read by group or others (mode %03o); chmod 600 it", key_path,
		         (unsigned)(key_st.st_mode & 0777));
	gnutls_datum_t cert = {(unsigned char *)f.cert_pem, (unsigned)cert_len};
	gnutls_datum_t key = {(unsigned char *)f.key_pem, (unsigned)key_len};
	if ((r = check_cert(cert_path, &cert, err, errlen)) < 0 || (r = check_key(key_path, &key, err, errlen)) < 0 ||
	    (r = check_pair(cert_path, key_path, &cert, &key, err, errlen)) < 0)
		goto fail;
	*ret = f;
	return 0;
fail:
	tls_files_clear(&f);
	return r;
}

void tls_files_clear(tls_files_t *f)
{
	if (f->key_pem) {
		sodium_memzero(f->key_pem, strlen(f->key_pem));
		free(f->key_pem);
	}
	free(f->cert_pem);
	f->cert_pem = f->key_pem = NULL;
}
