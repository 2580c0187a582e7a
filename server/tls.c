/* SPDX-License-Identifier: Apache-2.0 */
/* tls.c — see tls.h. */
#define LOG_PREFIX "tls: "
#include "server/tls.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <microhttpd.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* OpenSSL's reason for the failure: the first in its error queue. */
static const char *ssl_reason(void)
{
	unsigned long e = ERR_peek_error();
	const char *r = e ? ERR_reason_error_string(e) : NULL;

	return r ? r : "unknown error";
}

/* An encrypted key is refused, never asked a passphrase for on a terminal;
 * *u (a bool) says it was one. */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
	if (u)
		*(bool *)u = true;
	return -1;
}

/* Read what (the certificate or the key) from path into *out: text, not
 * empty.  0 or -errno, logged. */
static int read_pem(const char *what, const char *path, char **out)
{
	size_t len = 0;
	int ret = read_file(path, out, &len, TLS_PEM_MAX);

	if (ret) {
		pr_err("TLS %s file %s: %s", what, path,
		       ret == -EFBIG ? "larger than 1 MiB" : strerror(-ret));
		return ret;
	}
	if (strlen(*out) != len || strspn(*out, " \t\r\n") == len) {
		pr_err("TLS %s file %s: %s", what, path,
		       len ? "not PEM text (a NUL byte, or only blanks)" : "empty");
		return -EINVAL;
	}
	return 0;
}

/* The certificate, the key and their match, as OpenSSL reads them.  0 or
 * -EINVAL, logged naming the file at fault. */
static int check_pair(const struct tls *t, const char *cert_path, const char *key_path)
{
	BIO *b = NULL;
	X509 *x = NULL;
	EVP_PKEY *k = NULL;
	bool encrypted = false;
	int ret = -EINVAL;

	b = BIO_new_mem_buf(t->cert, -1);
	x = b ? PEM_read_bio_X509(b, NULL, no_passphrase, NULL) : NULL;
	if (!x) {
		pr_err("TLS certificate file %s: not a PEM certificate (OpenSSL: %s)", cert_path,
		       ssl_reason());
		goto out;
	}
	BIO_free(b);
	b = BIO_new_mem_buf(t->key, -1);
	k = b ? PEM_read_bio_PrivateKey(b, NULL, no_passphrase, &encrypted) : NULL;
	if (!k && encrypted) {
		pr_err("TLS key file %s: the key is encrypted: thawd needs it unencrypted "
		       "(openssl pkey -in KEY -out NEW-KEY asks the passphrase once)",
		       key_path);
		goto out;
	}
	if (!k) {
		pr_err("TLS key file %s: not a PEM private key (OpenSSL: %s)", key_path,
		       ssl_reason());
		goto out;
	}
	if (X509_check_private_key(x, k) != 1) {
		pr_err("TLS key file %s is not the key of the certificate in %s", key_path,
		       cert_path);
		goto out;
	}
	if (X509_cmp_current_time(X509_get0_notAfter(x)) < 0)
		pr_warn("TLS certificate file %s: the certificate has expired: clients will "
			"refuse it",
			cert_path);
	ret = 0;
out:
	ERR_clear_error(); /* this thread's: nothing of it is left for others to read */
	EVP_PKEY_free(k);
	X509_free(x);
	BIO_free(b);
	return ret;
}

#define TRIAL_MSG_MAX 256

/* The first message libmicrohttpd logs during the trial below, into cls
 * (TRIAL_MSG_MAX bytes). */
__attribute__((format(printf, 2, 0)))
static void trial_log(void *cls, const char *fmt, va_list ap)
{
	char *msg = cls;
	size_t n;

	if (msg[0])
		return;
	vsnprintf(msg, TRIAL_MSG_MAX, fmt, ap);
	n = strlen(msg);
	while (n && msg[n - 1] == '\n')
		msg[--n] = '\0';
}

static enum MHD_Result trial_request(void *cls, struct MHD_Connection *c, const char *url,
				     const char *method, const char *version, const char *data,
				     size_t *data_size, void **con_cls)
{
	return MHD_NO;
}

/* Whether libmicrohttpd serves the pair: a daemon with no socket and no
 * thread builds GnuTLS's credentials from them, as the real one will once
 * it listens.  0 or -EINVAL, logged. */
static int check_mhd(const struct tls *t, const char *cert_path, const char *key_path)
{
	struct MHD_Daemon *d;
	char msg[TRIAL_MSG_MAX] = "";

	d = MHD_start_daemon(MHD_USE_TLS | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ERROR_LOG, 0, NULL,
			     NULL, trial_request, NULL, MHD_OPTION_EXTERNAL_LOGGER, trial_log, msg,
			     MHD_OPTION_HTTPS_MEM_CERT, t->cert, MHD_OPTION_HTTPS_MEM_KEY, t->key,
			     MHD_OPTION_END);
	if (!d) {
		pr_err("libmicrohttpd cannot serve TLS with the certificate %s and the key %s: %s",
		       cert_path, key_path, msg[0] ? msg : "it gives no reason");
		return -EINVAL;
	}
	MHD_stop_daemon(d);
	return 0;
}

/* Whether this thawd can serve TLS at all.  false logged. */
static bool tls_built_in(void)
{
#ifdef THAW_STATIC
	/* Its libmicrohttpd has TLS, but common/static_notls.c stands in for
	 * GnuTLS and refuses everything. */
	pr_err("this thawd is the static build (STATIC=1), which has no TLS: use the "
	       "regular build for --tls-cert / --tls-key");
	return false;
#else
	if (MHD_is_feature_supported(MHD_FEATURE_TLS) == MHD_YES)
		return true;
	pr_err("this libmicrohttpd was built without TLS (MHD_FEATURE_TLS): --tls-cert / "
	       "--tls-key need one built with GnuTLS");
	return false;
#endif
}

int tls_load(struct tls *t, const char *cert_path, const char *key_path)
{
	struct stat st;
	int ret;

	memset(t, 0, sizeof(*t));
	if (!tls_built_in())
		return -ENOTSUP;
	ret = read_pem("certificate", cert_path, &t->cert);
	if (!ret)
		ret = read_pem("key", key_path, &t->key);
	if (!ret)
		ret = check_pair(t, cert_path, key_path);
	if (!ret)
		ret = check_mhd(t, cert_path, key_path);
	if (ret) {
		tls_release(t);
		return ret;
	}
	if (stat(key_path, &st) == 0 && (st.st_mode & S_IROTH))
		pr_warn("TLS key file %s can be read by every user (mode %04o): chmod o-r %s",
			key_path, (unsigned)(st.st_mode & 07777), key_path);
	return 0;
}

void tls_release(struct tls *t)
{
	if (t->key)
		OPENSSL_cleanse(t->key, strlen(t->key));
	free(t->key);
	free(t->cert);
	t->key = t->cert = NULL;
}
