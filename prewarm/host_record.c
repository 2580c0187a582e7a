/* SPDX-License-Identifier: Apache-2.0 */
/* host_record.c — see host_record.h. */
#define LOG_PREFIX "host_record: "
#include "prewarm/host_record.h"
#include "common/log.h"
#include "common/spawn.h"
#include "common/util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

/* The XSAVE state components, by bit of XCR0, as the kernel names them. */
static const char *const xfeature_names[] = {
	"x87",	     "sse",	  "avx",	 "mpx_bndregs",	     "mpx_bndcsr",
	"avx512_opmask", "avx512_zmm_hi256", "avx512_hi16_zmm", "pt", "pkru",
	"pasid",     "cet_u",	  "cet_s",	 "hdc",		     "uintr",
	"lbr",	     "hwp",	  "amx_tilecfg", "amx_tiledata",     "apx",
};

/* The XSAVE components the OS enables (XCR0): what CRIU's FPU check
 * compares.  0 where there is no XSAVE (or no x86). */
static uint64_t xfeatures(void)
{
#if defined(__x86_64__) || defined(__i386__)
	unsigned int a, b, c, d, lo, hi;

	if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) /* OSXSAVE */
		return 0;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return ((uint64_t)hi << 32) | lo;
#else
	return 0;
#endif
}

void host_record_version(const char *prog, char *buf, size_t len)
{
	const char *argv[] = { prog, "--version", NULL };
	struct spawn sp = SPAWN_INIT;
	ssize_t n = 0, r;

	buf[0] = '\0';
	sp.argv = argv;
	sp.out = SPAWN_PIPE;
	if (spawn_start(&sp))
		return;
	while ((size_t)n < len - 1 &&
	       ((r = read(sp.pipe_out, buf + n, len - 1 - n)) > 0 || (r < 0 && errno == EINTR)))
		n += r > 0 ? r : 0;
	buf[n] = '\0';
	close(sp.pipe_out);
	spawn_wait(&sp, -1, NULL);
	buf[strcspn(buf, "\n")] = '\0';
}

static json_t *gpu_json(const struct cuda_device *d)
{
	char cc[32] = "";

	if (d->cc_major >= 0 && d->cc_minor >= 0)
		snprintf(cc, sizeof(cc), "%d.%d", d->cc_major, d->cc_minor);
	return json_pack("{s:s, s:s}", "name", d->name, "cc", cc);
}

json_t *host_record_here(const struct thaw_config *c)
{
	struct cuda_device *devs = NULL;
	struct utsname u;
	char criu[256], kver[64];
	const char *v;
	json_t *o = json_object(), *g;
	size_t n = 0;
	int dv;

	if (!o)
		return NULL;
	if (uname(&u) == 0) {
		json_object_set_new(o, "kernel", json_string(u.release));
		json_object_set_new(o, "arch", json_string(u.machine));
	}
	host_record_version(c->criu, criu, sizeof(criu));
	/* "Version: 4.2.1" */
	v = strncmp(criu, "Version: ", 9) ? criu : criu + 9;
	json_object_set_new(o, "criu", json_string(v));
	if (xfeatures())
		json_object_set_new(o, "xfeatures", json_integer((json_int_t)xfeatures()));
	if (cuda_available() && cuda_driver_version(&dv) == 0) {
		if (cuda_kernel_driver_version(kver, sizeof(kver)))
			kver[0] = '\0';
		json_object_set_new(o, "driver",
				    json_pack("{s:i, s:s}", "cuda", dv, "version", kver));
		if (cuda_devices(&devs, &n) == 0) {
			g = json_array();
			for (size_t i = 0; g && i < n; i++)
				json_array_append_new(g, gpu_json(&devs[i]));
			json_object_set_new(o, "gpus", g);
		}
		free(devs);
	}
	return o;
}

json_t *host_record_snapshot(const json_t *here, const struct cuda_device *gpus, size_t n,
			     const char *image_digest)
{
	json_t *o = json_deep_copy(here), *g = json_array();

	if (!o || !g) {
		json_decref(o);
		json_decref(g);
		return NULL;
	}
	for (size_t i = 0; i < n; i++)
		json_array_append_new(g, gpu_json(&gpus[i]));
	json_object_set_new(o, "gpus", g);
	if (image_digest && *image_digest)
		json_object_set_new(o, "image", json_string(image_digest));
	return o;
}

/* ---- comparing ---- */

struct why {
	char *buf;
	size_t len, used;
	int n;
};

static void __attribute__((format(printf, 2, 3))) differ(struct why *w, const char *fmt, ...)
{
	va_list ap;
	int k;

	if (w->len && w->used < w->len) {
		if (w->n) {
			k = snprintf(w->buf + w->used, w->len - w->used, "; ");
			w->used += k > 0 ? (size_t)k : 0;
		}
		if (w->used < w->len) {
			va_start(ap, fmt);
			k = vsnprintf(w->buf + w->used, w->len - w->used, fmt, ap);
			va_end(ap);
			w->used += k > 0 ? (size_t)k : 0;
		}
		if (w->used >= w->len)
			w->used = w->len - 1;
	}
	w->n++;
}

static const char *str(const json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

/* Compare dotted versions: <0, 0, >0. */
static int version_cmp(const char *a, const char *b)
{
	while (*a || *b) {
		long x = strtol(a, (char **)&a, 10), y = strtol(b, (char **)&b, 10);

		if (x != y)
			return x < y ? -1 : 1;
		a += *a == '.';
		b += *b == '.';
		if ((*a && (*a < '0' || *a > '9')) || (*b && (*b < '0' || *b > '9')))
			break; /* "4.2.1-rc": what follows the numbers is not compared */
	}
	return 0;
}

static void compare_cpu(const json_t *rec, const json_t *here, struct why *w)
{
	const char *ra = str(rec, "arch"), *ha = str(here, "arch");
	uint64_t rx = (uint64_t)json_integer_value(json_object_get(rec, "xfeatures"));
	uint64_t hx = (uint64_t)json_integer_value(json_object_get(here, "xfeatures"));
	char names[512] = "";
	size_t o = 0;

	if (ra && ha && *ra && *ha && strcmp(ra, ha)) {
		differ(w, "the snapshot was made on %s, this host is %s", ra, ha);
		return;
	}
	if (!rx || !hx || !(rx & ~hx))
		return;
	for (unsigned b = 0; b < 64; b++) {
		if (!((rx & ~hx) & (1ull << b)))
			continue;
		if (b < ARRAY_SIZE(xfeature_names))
			o += (size_t)snprintf(names + o, o < sizeof(names) ? sizeof(names) - o : 0,
					      "%s%s", o ? ", " : "", xfeature_names[b]);
		else
			o += (size_t)snprintf(names + o, o < sizeof(names) ? sizeof(names) - o : 0,
					      "%sbit %u", o ? ", " : "", b);
		if (o >= sizeof(names))
			break;
	}
	differ(w, "this CPU lacks FPU state the snapshot's had (%s; XSAVE 0x%llx here, 0x%llx "
		  "recorded): CRIU's FPU check refuses it",
	       names, (unsigned long long)hx, (unsigned long long)rx);
}

static void compare_criu(const json_t *rec, const json_t *here, struct why *w)
{
	const char *r = str(rec, "criu"), *h = str(here, "criu");

	if (r && h && *r && *h && version_cmp(h, r) < 0)
		differ(w, "CRIU %s here is older than the %s that made the snapshot", h, r);
}

static void gpu_words(const json_t *g, char *buf, size_t len)
{
	const char *cc = str(g, "cc");

	snprintf(buf, len, "%s%s%s%s", str(g, "name") ?: "?", cc && *cc ? " (compute capability " : "",
		 cc && *cc ? cc : "", cc && *cc ? ")" : "");
}

static void compare_gpus(const json_t *rec, const json_t *here, struct why *w)
{
	const json_t *rd = json_object_get(rec, "driver"), *hd = json_object_get(here, "driver");
	const json_t *rg = json_object_get(rec, "gpus"), *hg = json_object_get(here, "gpus");
	const char *rv = str(rd, "version"), *hv = str(hd, "version");
	json_int_t rc = json_integer_value(json_object_get(rd, "cuda"));
	json_int_t hc = json_integer_value(json_object_get(hd, "cuda"));
	bool used[64] = { false };
	size_t i, k, nh = json_array_size(hg);

	/* No driver here, or too few GPUs: 503 no_gpu, as before. */
	if (!hd || !rd || json_array_size(rg) > nh)
		return;
	if (rv && hv && *rv && *hv && strcmp(rv, hv))
		differ(w, "the snapshot's CUDA checkpoint is of driver %s, this host runs %s", rv,
		       hv);
	else if (rc && hc && rc != hc)
		differ(w, "the snapshot's CUDA checkpoint is of CUDA driver %lld.%lld, this host's "
			  "is %lld.%lld",
		       (long long)rc / 1000, (long long)(rc % 1000) / 10, (long long)hc / 1000,
		       (long long)(hc % 1000) / 10);
	for (i = 0; i < json_array_size(rg); i++) {
		const json_t *g = json_array_get(rg, i);
		char a[160], b[160];

		for (k = 0; k < nh && k < ARRAY_SIZE(used); k++) {
			const json_t *h = json_array_get(hg, k);

			if (!used[k] && !strcmp(str(g, "name") ?: "", str(h, "name") ?: "") &&
			    !strcmp(str(g, "cc") ?: "", str(h, "cc") ?: ""))
				break;
		}
		if (k < nh && k < ARRAY_SIZE(used)) {
			used[k] = true;
			continue;
		}
		gpu_words(g, a, sizeof(a));
		gpu_words(json_array_get(hg, 0), b, sizeof(b));
		differ(w, "GPU %zu of the snapshot is %s; this host has no such GPU (its GPU 0 is %s)",
		       i, a, b);
	}
}

int host_record_compare(const json_t *rec, bool gpu, const json_t *here, char *why, size_t len)
{
	struct why w = { .buf = why, .len = len };

	if (len)
		why[0] = '\0';
	if (!json_is_object(rec) || !json_is_object(here))
		return 0;
	compare_cpu(rec, here, &w);
	compare_criu(rec, here, &w);
	if (gpu)
		compare_gpus(rec, here, &w);
	return w.n ? 1 : 0;
}
