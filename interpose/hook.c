/* SPDX-License-Identifier: Apache-2.0 */
/* hook.c — how the function's calls to the driver reach the library.
 *
 * Three ways in (docs/DESIGN.md, "GPU memory", says what a PyTorch process
 * was seen to do): the driver's exported symbols, which a program linked against
 * libcuda binds to this preloaded library first (alloc.c defines the
 * memory calls, exports.S a held stub for the others); dlsym on libcuda,
 * which the CUDA runtime uses to find cuGetProcAddress; and cuGetProcAddress
 * itself, through which the runtime resolves every other entry point.
 * Whatever comes back to the function is either the library's own
 * implementation (memory calls, cuGetProcAddress) or the driver's entry
 * point behind a trampoline of the gate (gate.S), so that every call can be
 * held while the function's device memory is away.
 */
#include "interpose/gm.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct gm_real gm_real;
volatile int gm_gate_closed;
volatile long gm_gate_inflight;
void *gm_slot_real[GM_SLOTS];

static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t slot_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned nslots;
static void *libcuda;       /* our handle on libcuda.so.1 */

double gm_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* --- the gate --- */

void gm_gate_wait(void)
{
	pthread_mutex_lock(&gate_mu);
	while (__atomic_load_n(&gm_gate_closed, __ATOMIC_SEQ_CST))
		pthread_cond_wait(&gate_cv, &gate_mu);
	pthread_mutex_unlock(&gate_mu);
}

void gm_gate_slow(unsigned long slot)
{
	if (slot < GM_SLOTS && !__atomic_load_n(&gm_slot_real[slot], __ATOMIC_ACQUIRE))
		gm_exports_resolve(slot);
	gm_gate_wait();
}

void gm_gate_enter(void)
{
	for (;;) {
		__atomic_add_fetch(&gm_gate_inflight, 1, __ATOMIC_SEQ_CST);
		if (!__atomic_load_n(&gm_gate_closed, __ATOMIC_SEQ_CST))
			return;
		__atomic_sub_fetch(&gm_gate_inflight, 1, __ATOMIC_SEQ_CST);
		gm_gate_wait();
	}
}

void gm_gate_exit(void)
{
	__atomic_sub_fetch(&gm_gate_inflight, 1, __ATOMIC_SEQ_CST);
}

int gm_gate_close(unsigned timeout_ms)
{
	double until = gm_now_ms() + timeout_ms;

	__atomic_exchange_n(&gm_gate_closed, 1, __ATOMIC_SEQ_CST);
	while (__atomic_load_n(&gm_gate_inflight, __ATOMIC_SEQ_CST) > 0) {
		if (gm_now_ms() > until) {
			gm_gate_open();
			return -1;
		}
		nanosleep(&(struct timespec){ 0, 200000 }, NULL);
	}
	return 0;
}

void gm_gate_open(void)
{
	pthread_mutex_lock(&gate_mu);
	__atomic_store_n(&gm_gate_closed, 0, __ATOMIC_SEQ_CST);
	pthread_cond_broadcast(&gate_cv);
	pthread_mutex_unlock(&gate_mu);
}

/* --- the driver --- */

static void *real_dlsym_of(void)
{
	void *p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");

	return p ? p : dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
}

static pthread_mutex_t real_mu = PTHREAD_MUTEX_INITIALIZER;
static volatile int real_done;

/* Only once the process has libcuda (RTLD_NOLOAD): the library never loads
 * the driver into a process that does not use it. */
static int real_init_locked(void)
{
	gm_real.dlsym = real_dlsym_of();
	if (!gm_real.dlsym)
		return -1;
	libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	if (!libcuda)
		return -1;
#define RESOLVE(sym) gm_real.sym = (cu_fn_##sym *)gm_real.dlsym(libcuda, #sym);
	GM_REAL(RESOLVE)
#undef RESOLVE
	return 0;
}

int gm_real_init(void)
{
	int ret = 0;

	if (__atomic_load_n(&real_done, __ATOMIC_ACQUIRE))
		return 0;
	pthread_mutex_lock(&real_mu);
	if (!real_done) {
		ret = real_init_locked();
		if (!ret)
			__atomic_store_n(&real_done, 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&real_mu);
	return ret;
}

/* p lies in a library named libcuda.so*. */
static bool in_libcuda(void *p)
{
	Dl_info info;
	const char *base;

	if (!dladdr(p, &info) || !info.dli_fname)
		return false;
	base = strrchr(info.dli_fname, '/');
	base = base ? base + 1 : info.dli_fname;
	return !strncmp(base, "libcuda.so", 10);
}

const char *gm_error_name(cu_result r, char *buf, size_t len)
{
	const char *s = NULL;

	if (gm_real.cuGetErrorName && gm_real.cuGetErrorName(r, &s) == CU_SUCCESS && s)
		return s;
	snprintf(buf, len, "CUresult %d", r);
	return buf;
}

/* --- exports.S's entry points --- */

/* In exports.S's order: slot GM_SLOTS - 1 - k is names[k]. */
#define EXPORT_NAME(sym) #sym,
static const char *const export_names[GM_EXPORTS] = { GM_EXPORTS_HELD(EXPORT_NAME) };
#undef EXPORT_NAME

static cu_result not_found(void)
{
	return CU_ERR_NOT_FOUND;
}

void gm_exports_resolve(unsigned long slot)
{
	unsigned long k = GM_SLOTS - 1 - slot;
	void *p = NULL;

	if (k < GM_EXPORTS && gm_real_init() == 0)
		p = gm_real.dlsym(libcuda, export_names[k]);
	/* Only a program linked against libcuda calls these, so libcuda is
	 * there; a driver without the entry point answers as it would. */
	__atomic_store_n(&gm_slot_real[slot], p ? p : (void *)not_found, __ATOMIC_RELEASE);
	gm_control_start();
}

/* --- wrapping what the function is given --- */

/* A trampoline for p: the same slot for the same entry point. */
static void *slot_for(void *p)
{
	void *out = p;
	unsigned i;

	pthread_mutex_lock(&slot_mu);
	for (i = 0; i < nslots; i++)
		if (gm_slot_real[i] == p)
			break;
	if (i == nslots && nslots < GM_SLOTS - GM_EXPORTS)
		__atomic_store_n(&gm_slot_real[nslots++], p, __ATOMIC_RELEASE);
	if (i < nslots)
		out = (void *)(gm_slots + 16 * (size_t)i);
	pthread_mutex_unlock(&slot_mu);
	return out;
}

void *gm_wrap(const char *name, void *p)
{
	void *own;

	if (!p || gm_real_init())
		return p;
	gm_control_start();
	own = gm_own(p);
	if (own)
		return own;
	/* The error-string calls are what a failure path uses: never held. */
	if (name && (!strcmp(name, "cuGetErrorName") || !strcmp(name, "cuGetErrorString")))
		return p;
	return slot_for(p);
}

static cu_result own_getproc(const char *symbol, void **pfn, int version, uint64_t flags);
static cu_result own_getproc_v2(const char *symbol, void **pfn, int version, uint64_t flags,
			       cu_proc_query *status);

/* cuGetProcAddress at 12000 and later has the 5-argument signature. */
static void *getproc_for(int version)
{
	return version >= 12000 ? (void *)own_getproc_v2 : (void *)own_getproc;
}

static cu_result own_getproc_v2(const char *symbol, void **pfn, int version, uint64_t flags,
			       cu_proc_query *status)
{
	cu_result r;

	if (gm_real_init() || !gm_real.cuGetProcAddress_v2)
		return CU_ERR_NOT_INITIALIZED;
	r = gm_real.cuGetProcAddress_v2(symbol, pfn, version, flags, status);
	if (r == CU_SUCCESS && pfn && *pfn && symbol) {
		if (!strcmp(symbol, "cuGetProcAddress"))
			*pfn = getproc_for(version);
		else
			*pfn = gm_wrap(symbol, *pfn);
	}
	return r;
}

static cu_result own_getproc(const char *symbol, void **pfn, int version, uint64_t flags)
{
	cu_result r;

	if (gm_real_init() || !gm_real.cuGetProcAddress)
		return CU_ERR_NOT_INITIALIZED;
	r = gm_real.cuGetProcAddress(symbol, pfn, version, flags);
	if (r == CU_SUCCESS && pfn && *pfn && symbol) {
		if (!strcmp(symbol, "cuGetProcAddress"))
			*pfn = getproc_for(version);
		else
			*pfn = gm_wrap(symbol, *pfn);
	}
	return r;
}

GM_EXPORTS_OWN_PROC(GM_EXPORT_AS)

/* dlsym: libcuda's entry points come back wrapped.  Everything else, and
 * every call before the driver is there, is glibc's dlsym's answer.  (A
 * caller's RTLD_NEXT is resolved from this library, not from the caller:
 * the one lookup an interposer of dlsym cannot reproduce.) */
GM_EXPORT void *dlsym(void *handle, const char *name)
{
	static void *(*real)(void *, const char *);
	void *p;

	if (!real)
		real = real_dlsym_of();
	if (!real)
		return NULL;
	p = real(handle, name);
	if (!p || name[0] != 'c' || name[1] != 'u')
		return p;
	if (!in_libcuda(p) || gm_real_init())
		return p;
	if (!strcmp(name, "cuGetProcAddress"))
		return (void *)own_getproc;
	if (!strcmp(name, "cuGetProcAddress_v2"))
		return (void *)own_getproc_v2;
	return gm_wrap(name, p);
}
