/* SPDX-License-Identifier: Apache-2.0 */
/* gm.h — libthaw-cuda's parts and what they share (docs/DESIGN.md, "GPU
 * memory").  The library is preloaded into a GPU function; it sees the
 * function's device allocations, makes those it owns movable (memory made
 * with the driver's VMM calls, at addresses it keeps), and on thawd's word
 * saves them to a file and unmaps them before the driver's checkpoint, then
 * maps and copies them back after the driver's restore.
 *
 *   hook.c     how calls reach the library: dlsym, cuGetProcAddress, exports
 *   gate.S     one trampoline per driver entry point: holds calls while closed
 *   alloc.c    the allocations it sees, and the memory calls it implements
 *   move.c     save and copy back
 *   prefill.c  the saved layout for thawd, and the memory thawd filled
 *   share.c    memory shared with the function's other processes
 *   control.c  thawd's signal, the control thread, the status file
 *
 * Nothing here links thaw's own libraries: a function's process gets only
 * this library, libc and the driver it already uses; the driver's types and
 * entry points are common/cuda_abi.h's.
 */
#ifndef THAW_INTERPOSE_GM_H
#define THAW_INTERPOSE_GM_H

#include "common/gpumem_protocol.h"
#include "common/cuda_abi.h"
#include "interpose/exports.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GM_HIDDEN __attribute__((visibility("hidden")))
#define GM_EXPORT __attribute__((visibility("default")))
/* sym, exported as another name of fn (exports.h's lists), defined in
 * the same file. */
#define GM_EXPORT_AS(sym, fn) extern cu_fn_##sym sym __attribute__((alias(#fn), visibility("default")));

/* --- the driver, as the library calls it (never through the gate) --- */
/* Every entry point of cuda_abi.h declared as libcuda has it: the ones the
 * library exports (alloc.c, hook.c) are checked against it here, and a
 * call of one that is not the library's fails the link (-z defs: the
 * library never calls the driver but through gm_real). */
#define GM_DECLARE(sym, params) cu_result sym params;
CU_ENTRY_POINTS(GM_DECLARE)
CU_ENTRY_POINTS_UNCHECKED(GM_DECLARE)
#undef GM_DECLARE

/* The entry points the library calls, resolved from libcuda by name. */
#define GM_REAL(X)                                                                           \
	X(cuGetProcAddress) X(cuGetProcAddress_v2) X(cuGetErrorName)                         \
	X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuMemAllocAsync) X(cuMemAllocAsync_ptsz)         \
	X(cuMemAllocFromPoolAsync) X(cuMemAllocFromPoolAsync_ptsz) X(cuMemFreeAsync)        \
	X(cuMemFreeAsync_ptsz) X(cuMemAllocManaged) X(cuMemAllocPitch_v2)                    \
	X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemCreate) X(cuMemRelease) X(cuMemMap) \
	X(cuMemUnmap) X(cuMemSetAccess) X(cuMemRetainAllocationHandle)                       \
	X(cuMemGetAllocationPropertiesFromHandle) X(cuMemExportToShareableHandle)            \
	X(cuMemImportFromShareableHandle) X(cuMemGetAllocationGranularity)                   \
	X(cuCtxGetCurrent) X(cuCtxSetCurrent) X(cuCtxGetDevice) X(cuCtxSynchronize)          \
	X(cuDevicePrimaryCtxRetain) X(cuDeviceGetCount) X(cuDeviceCanAccessPeer)             \
	X(cuDeviceGet) X(cuDeviceGetUuid) X(cuDeviceGetUuid_v2)                              \
	X(cuMemcpyDtoH_v2) X(cuMemcpyHtoDAsync_v2) X(cuMemHostRegister_v2)                   \
	X(cuMemHostUnregister) X(cuMemAllocHost_v2) X(cuMemFreeHost) X(cuStreamCreate)       \
	X(cuStreamSynchronize) X(cuStreamDestroy_v2)

struct gm_real {
	void *(*dlsym)(void *, const char *);
#define GM_REAL_FIELD(sym) cu_fn_##sym *sym;
	GM_REAL(GM_REAL_FIELD)
#undef GM_REAL_FIELD
};
extern struct gm_real gm_real GM_HIDDEN;

/* Resolve gm_real from libcuda (once; a process without libcuda keeps
 * NULLs).  0, or -1 when libcuda cannot be opened. */
int gm_real_init(void) GM_HIDDEN;
/* "CUDA_ERROR_OUT_OF_MEMORY" for r (the driver's name, else the number). */
const char *gm_error_name(cu_result r, char *buf, size_t len) GM_HIDDEN;

/* --- the gate (gate.S, hook.c) --- */
extern volatile int gm_gate_closed GM_HIDDEN;
extern volatile long gm_gate_inflight GM_HIDDEN;
extern void *gm_slot_real[GM_SLOTS] GM_HIDDEN;
extern const char gm_slots[] GM_HIDDEN; /* slot i's code at gm_slots + 16 * i */
/* The top GM_EXPORTS slots are exports.S's named entry points. */
/* Fill slot's driver address by its exported name (on the first call);
 * a driver without it gets a stub that answers CU_ERR_NOT_FOUND. */
void gm_exports_resolve(unsigned long slot) GM_HIDDEN;
/* gate.S's slow path: the slot's driver address filled in if it has none,
 * then a wait until the gate is open. */
void gm_gate_slow(unsigned long slot) GM_HIDDEN;
/* Returns once the gate is open. */
void gm_gate_wait(void) GM_HIDDEN;
/* The same protocol for the calls the library implements in C. */
void gm_gate_enter(void) GM_HIDDEN;
void gm_gate_exit(void) GM_HIDDEN;
/* Close the gate and wait up to timeout_ms for the calls inside the driver
 * to return: 0, or -1 (the gate is open again) when one did not. */
int gm_gate_close(unsigned timeout_ms) GM_HIDDEN;
void gm_gate_open(void) GM_HIDDEN;

/* What the function gets for a driver entry point p named name: the
 * library's own implementation, else p behind a trampoline of the gate
 * (p itself when the slots are used up: correct, only not held). */
void *gm_wrap(const char *name, void *p) GM_HIDDEN;
/* The library's own implementation of the entry point whose driver address
 * is p, or NULL. */
void *gm_own(void *p) GM_HIDDEN;

/* --- allocations (alloc.c) --- */
/* The locations a mapping's access is kept for: each GPU thaw counts,
 * and as many again (host memory, NUMA nodes).  A mapping given access for
 * more is left to the driver (access_full), never mapped back without it. */
#define GM_MAX_ACCESS (2 * CUDA_MAX_DEVICES)
/* Descriptors kept per exported or imported handle, and importers counted
 * per export: past them the handle is left to the driver (share_full). */
#define GM_MAX_SHARE_FDS 8
#define GM_MAX_IMPORTERS 32

struct gm_handle {
	cu_handle vh; /* the value the function holds */
	cu_handle rh; /* the driver's handle now; 0 while saved */
	size_t size;
	cu_mem_prop prop;
	int refs;          /* the function's references: 1 made or imported, +1 a
			    * retain, -1 a release; 0: it dies with its last unmap */
	bool shared;       /* exported or imported: another process may use it */
	bool dead;         /* released and no longer mapped */
	int nmaps;
	/* Shared (share.c): exported or imported here as a POSIX descriptor,
	 * a dup of each kept (fds) for thawd to pair imports with exports. */
	bool exported, imported, share_full;
	bool share_off; /* exported: an importer cannot let go of it (this save) */
	bool carried;   /* unmapped by the last save as shared: the restore hands it over */
	bool fill_fd;   /* fds[0] is the export thawd's fill sent (this restore) */
	int fds[GM_MAX_SHARE_FDS], nfds;
	/* What thawd's pairing said at the last save.  Imported: whose export
	 * it is (creator 0: nobody's known).  Exported: who imports it, an
	 * entry per import (a process may import it twice). */
	pid_t creator;
	cu_handle creator_vh;
	pid_t importers[GM_MAX_IMPORTERS];
	int nimporters;
};
/* The physical allocations the function made or got (alloc.c). */
extern struct gm_handle **gm_handles GM_HIDDEN;
extern size_t gm_nhandles GM_HIDDEN;

struct gm_map {
	cu_ptr va;
	size_t size, offset;
	struct gm_handle *h;
	cu_ctx ctx;            /* a context of its device, for copies */
	int device;
	cu_access_desc access[GM_MAX_ACCESS];
	int naccess;
	bool access_full;         /* given access for more: not movable */
	bool ours;                /* made by the library's cuMemAlloc */
	size_t reserved;          /* ours: the address range reserved for it */
	bool saved;               /* unmapped, its bytes at file_off */
	bool restoring;           /* being copied back now */
	bool access_pending;      /* mapped, its access not yet set (gm_access_pending) */
	uint64_t file_off;
	struct gm_map *next;
};

extern pthread_mutex_t gm_lock GM_HIDDEN; /* the tables below */
extern struct gm_map *gm_maps GM_HIDDEN;  /* every live mapping the library saw */

/* What the library saw but leaves to the driver's checkpoint. */
struct gm_left {
	unsigned long long allocs, bytes; /* live now */
};
extern struct gm_left gm_left GM_HIDDEN;
/* Allocations from this size up are made movable (THAW_GPUMEM_MIN_BYTES). */
extern size_t gm_min_bytes GM_HIDDEN;

/* --- save and copy back (move.c) --- */
/* What a save or a copy back did: the record of the answer
 * (common/gpumem_protocol.h), filled as it goes. */
void gm_save(const char *dir, unsigned seq, struct gpumem_record *r) GM_HIDDEN;
/* in_dir: the saved file's; out_dir: where thawd's prefill socket is. */
void gm_restore(const char *in_dir, const char *out_dir, struct gpumem_record *r) GM_HIDDEN;
void gm_release_pinned(void) GM_HIDDEN;

/* --- thawd's fill (prefill.c) --- */
/* After a save: dir/gpu-<pid>.layout for the saved mappings; 0 or -1
 * (none written: the save stands, a restore copies).  Under gm_lock. */
int gm_layout_write(const char *dir) GM_HIDDEN;
/* At a restore, before anything is mapped: each saved mapping thawd sent
 * ready-filled memory for is mapped from it and no longer saved.  Nothing
 * (no socket, a refusal) leaves the mappings to the copy.  Under gm_lock. */
void gm_prefill_take(const char *dir, struct gpumem_record *r) GM_HIDDEN;
/* Map handle rh at m's address, as the memory m names now, with m's access
 * (with_access), or with it left for gm_access_pending (move.c). */
cu_result gm_map_handle(struct gm_map *m, cu_handle rh, bool with_access) GM_HIDDEN;
/* Access given to every mapping gm_map_handle left without it, in as few
 * calls as the driver takes (a run of adjacent mappings with the same
 * access in one); a mapping that cannot have it fails r. */
void gm_access_pending(struct gpumem_record *r) GM_HIDDEN;

/* --- shared memory (share.c; all under gm_lock) --- */
/* What the save does with a mapping: its bytes into the file (private, or
 * shared and made here), only an unmap (imported: its creator saves the
 * bytes, and hands the memory over again at the restore), or nothing
 * (left to the driver). */
enum gm_carry { GM_LEAVE, GM_COPY, GM_DROP };
enum gm_carry gm_carry_of(const struct gm_map *m) GM_HIDDEN;
/* Rewrite dir/<pid>.fds from the handles' kept descriptors. */
void gm_share_fds_write(void) GM_HIDDEN;
/* Close the kept descriptors of h (it died, or its memory was saved). */
void gm_share_fds_close(struct gm_handle *h) GM_HIDDEN;
/* At a save, the gate closed, before anything is synchronised: thawd's
 * pairing read into the handles. */
void gm_share_pair(const char *dir) GM_HIDDEN;
/* At a save, the contexts synchronised, before any byte is copied: the
 * function's processes agree on what of the memory they share is carried
 * (share.c, "Ordering").  0, or -1 with r's error. */
int gm_share_agree(const char *dir, unsigned seq, struct gpumem_record *r) GM_HIDDEN;
/* After a restore's copy (r->ok or not): each export made here handed to
 * its importers, each import taken from its creator and mapped.  Failures
 * in r. */
void gm_share_restore(const char *dir, struct gpumem_record *r) GM_HIDDEN;
/* In a child of fork: the kept descriptors closed (they would keep the
 * parent's shared memory alive), nothing shared carried. */
void gm_share_forget(void) GM_HIDDEN;
/* A saved shared mapping mapped again from its kept descriptor (a save
 * that failed halfway): 0, or the driver's error. */
cu_result gm_share_remap(struct gm_map *m) GM_HIDDEN;

/* --- control (control.c) --- */
/* The out directory thaw gave the process (NULL: not started by thaw). */
extern const char *gm_out_dir GM_HIDDEN;
/* Start the control thread once the process uses CUDA through the library. */
void gm_control_start(void) GM_HIDDEN;

double gm_now_ms(void) GM_HIDDEN;

/* Where a restore is, one line appended to <out dir>/<pid>.trace per
 * step, where the function was snapshotted with THAW_GPUMEM_TRACE=1 in
 * its environment (a restore that hangs then says in which step and which
 * driver call); nothing otherwise. */
void gm_trace(const char *fmt, ...) GM_HIDDEN __attribute__((format(printf, 1, 2)));

#endif
