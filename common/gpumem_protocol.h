/* SPDX-License-Identifier: Apache-2.0 */
/* gpumem_protocol.h — how thawd talks to libthaw-cuda.so, the library it
 * preloads into GPU functions (interpose/, docs/DESIGN.md "GPU memory").
 *
 * thawd asks with a real-time signal carrying an operation and a sequence
 * number (sigqueue); the library answers with a status file, written whole
 * (temporary file, then rename) into its out directory as
 * <ns pid>.status: one JSON object that names the sequence it answers
 * ("seq", and "op") and holds the record below.  No
 * descriptor stays open between two operations, so CRIU dumps the process
 * with nothing of this channel in it.  Constants, types and macros only:
 * the library links nothing of thaw's.
 */
#ifndef THAW_GPUMEM_PROTOCOL_H
#define THAW_GPUMEM_PROTOCOL_H

#include "common/cuda_abi.h"

#include <stdbool.h>
#include <stdint.h>

/* SIGRTMAX-4 on Linux: glibc keeps the first real-time signals for itself;
 * a function is unlikely to use this one.  Not a setting: thawd and every
 * library a snapshot carries must agree on it, and a function's
 * environment is the function's (libraries before this one took it from
 * THAW_GPUMEM_SIGNAL there, which thawd never read: thawd's signal then
 * killed the function at its first snapshot). */
#define GPUMEM_SIGNAL 60

enum gpumem_op {
	/* Hold every CUDA call, synchronise, save each movable allocation
	 * into <out>/gpu-<ns pid>.mem and unmap it (its address kept). */
	GPUMEM_OP_SAVE = 1,
	/* Map new device memory at the saved addresses, copy <in>/gpu-<ns
	 * pid>.mem back into it, let the held calls go. */
	GPUMEM_OP_RESTORE = 2,
	/* Unpin (cuMemHostUnregister) what RESTORE pinned; no answer. */
	GPUMEM_OP_RELEASE = 3,
};

/* sigqueue's value: the operation in the low 4 bits, the sequence above. */
#define GPUMEM_VALUE(op, seq) ((int)(((unsigned)(seq) << 4) | ((unsigned)(op) & 15u)))
#define GPUMEM_VALUE_OP(v) ((unsigned)(v) & 15u)
#define GPUMEM_VALUE_SEQ(v) ((unsigned)(v) >> 4)

/* The answer's record: X(kind, name, key), one list for the struct both
 * sides fill (struct gpumem_record in the library, struct gpumem_status's
 * fields in thawd), the library's writer (interpose/control.c) and thawd's
 * parser (common/gpumem.c).  A kind is the field's type and where its key
 * lies: BOOL, U64, INT, TEXT (a string), DEVS (an array, one figure per
 * device ordinal of the process, CUDA_MAX_DEVICES of them) at the top of
 * the object; MS (milliseconds) in its "ms" object.  A key an older
 * library does not write reads as 0: a thawd reads the answers of the
 * library a snapshot carries, however old. */
#define GPUMEM_RECORD_FIELDS(X)                                                               \
	X(BOOL, ok, "ok")                                                                     \
	X(TEXT, error, "error")             /* the library's words: the first failure */      \
	X(BOOL, held, "held")               /* not ok, and the function's calls stay held */  \
	X(U64, allocs, "allocs")            /* moved */                                       \
	X(U64, bytes, "bytes")                                                                \
	X(U64, left_allocs, "left_allocs")  /* left to the driver's checkpoint */             \
	X(U64, left_bytes, "left_bytes")                                                      \
	X(DEVS, dev_bytes, "dev_bytes")     /* moved, per device ordinal in the process */    \
	X(MS, hold_ms, "hold")              /* the gate closed, the calls out */              \
	X(MS, sync_ms, "sync")                                                                \
	X(MS, map_ms, "map")                                                                  \
	X(MS, copy_ms, "copy")                                                                \
	X(MS, total_ms, "total")                                                              \
	X(MS, populate_ms, "populate")      /* of copy: the slowest copy thread's */          \
	X(MS, register_ms, "register")                                                        \
	X(INT, copy_threads, "copy_threads")                                                  \
	X(INT, pinned_slices, "pinned_slices") /* of them, pinned by the driver */            \
	X(TEXT, register_error, "register_error") /* why one was not ("" if all were) */      \
	X(U64, prefilled_allocs, "prefilled_allocs") /* of those moved back, thawd's fill */  \
	X(U64, prefilled_bytes, "prefilled_bytes")                                            \
	X(DBL, prefill_ms, "prefill_ms")                                                     \
	X(U64, shared_allocs, "shared_allocs") /* shared with another process, carried */  \
	X(U64, shared_bytes, "shared_bytes")

#define GPUMEM_TEXT_MAX 512
#define GPUMEM_TYPE_BOOL bool
#define GPUMEM_TYPE_U64 uint64_t
#define GPUMEM_TYPE_INT int
#define GPUMEM_TYPE_MS double
#define GPUMEM_TYPE_DBL double
#define GPUMEM_TYPE_TEXT char
#define GPUMEM_TYPE_DEVS uint64_t
#define GPUMEM_DIM_BOOL
#define GPUMEM_DIM_U64
#define GPUMEM_DIM_INT
#define GPUMEM_DIM_MS
#define GPUMEM_DIM_DBL
#define GPUMEM_DIM_TEXT [GPUMEM_TEXT_MAX]
#define GPUMEM_DIM_DEVS [CUDA_MAX_DEVICES]
/* The record's fields as members of a struct. */
#define GPUMEM_RECORD_MEMBER(kind, name, key) GPUMEM_TYPE_##kind name GPUMEM_DIM_##kind;
#define GPUMEM_RECORD_MEMBERS GPUMEM_RECORD_FIELDS(GPUMEM_RECORD_MEMBER)

struct gpumem_record {
	GPUMEM_RECORD_MEMBERS
};

/* Inside the container. */
#define GPUMEM_LIB_NAME "libthaw-cuda.so"
#define GPUMEM_IN_DEST "/.thaw-gpu"      /* read-only: the library, the saved memory */
#define GPUMEM_OUT_DEST "/.thaw-gpu-out" /* writable: what a save writes, the answers */
#define GPUMEM_FILE_FMT "gpu-%d.mem"     /* per process, by its pid in the container */
#define GPUMEM_STATUS_FMT "%d.status"
/* Beside the saved memory, what thawd needs to fill device memory for a
 * restore itself: text, the first line GPUMEM_LAYOUT_MAGIC, then one line
 * per saved allocation: "<file offset> <size> <device ordinal>
 * <compression type> <GPUDirect RDMA capable> <usage> <device UUID>"
 * (decimal; the UUID as NVML writes it, "GPU-…", of the process's device
 * ordinal, which is the process's own, not the host's).  A library before
 * the UUID wrote six fields (thawd then reads the ordinal as the
 * snapshot's GPU of that index, where that is unambiguous); a thawd that
 * reads six ignores the seventh. */
#define GPUMEM_LAYOUT_FMT "gpu-%d.layout"
#define GPUMEM_LAYOUT_MAGIC "thaw-gpumem-layout 1"

/* Prefill: device memory thawd made and filled from the saved file while
 * CRIU and the driver restored.  Where thawd has it, it listens on this
 * socket in the out directory before asking RESTORE; the library connects
 * and receives messages of struct gpumem_prefill_msg, each with its n
 * allocations' POSIX file descriptors (cuMemExportToShareableHandle) as
 * SCM_RIGHTS, until one with n == 0.  An allocation received is imported
 * and mapped at its saved address instead of copied; one not received
 * (or that fails) is copied as before. */
#define GPUMEM_PREFILL_FMT "%d.prefill"
#define GPUMEM_PREFILL_BATCH 64
struct gpumem_prefill_msg {
	unsigned int n, reserved;
	struct {
		unsigned long long file_off, size;
	} e[GPUMEM_PREFILL_BATCH];
};

/* Memory the function's processes share (exported and imported VMM
 * handles, POSIX file descriptors), carried by the libraries themselves so
 * that the driver's checkpoint sees only private memory (docs/DESIGN.md,
 * "GPU memory", "Shared memory").  In the out directory:
 *   <ns pid>.fds   the library's: a dup of each descriptor the process
 *                  exported or imported, one line each, "e|i <handle value>
 *                  <fd number in that process>", rewritten whole;
 *   shared.pairs   thawd's, written before it asks SAVE: which import is
 *                  which export (kcmp(KCMP_FILE) of the two dups), one line
 *                  each, "<importer ns pid> <its handle value> <creator ns
 *                  pid> <creator's handle value>";
 *   <ns pid>.quiet an importer's, at SAVE once its calls are held and its
 *                  contexts synchronised: the SAVE's sequence number, then
 *                  "i <creator ns pid> <creator's handle value>" for each
 *                  import it can let go of;
 *   <ns pid>.plan  a creator's, at SAVE once its importers' .quiet came:
 *                  the sequence number, then "e <handle value>" for each
 *                  export it carries (its importers let go of those only);
 *   <ns pid>.share at RESTORE, the creator's socket: an importer sends a
 *                  struct gpumem_share_ask, gets a struct gpumem_share_answer
 *                  and, when it is 0, the new export's descriptor
 *                  (SCM_RIGHTS). */
#define GPUMEM_SHARE_FDS_FMT "%d.fds"
#define GPUMEM_SHARE_PAIRS "shared.pairs"
#define GPUMEM_SHARE_QUIET "quiet" /* <ns pid>.quiet */
#define GPUMEM_SHARE_PLAN "plan"   /* <ns pid>.plan */
#define GPUMEM_SHARE_SOCK_FMT "%d.share"
#define GPUMEM_SHARE_MAGIC 0x74687368u /* "thsh" */
/* An importer whose own restore failed still asks, with this flag: its
 * creator then fails at once rather than wait for it to the deadline. */
#define GPUMEM_SHARE_ABANDON 1u
struct gpumem_share_ask {
	unsigned int magic, flags;
	unsigned long long vh; /* the creator's handle value */
};
struct gpumem_share_answer {
	unsigned int magic;
	int err; /* 0, or -errno: nothing for this importer (no descriptor) */
	unsigned long long size;
};

/* The environment thaw gives the function (the library reads it once). */
#define GPUMEM_ENV_IN "THAW_GPUMEM_IN"
#define GPUMEM_ENV_OUT "THAW_GPUMEM_OUT"
/* Allocations smaller than this stay the driver's (default 2 MiB). */
#define GPUMEM_ENV_MIN_BYTES "THAW_GPUMEM_MIN_BYTES"

#endif
