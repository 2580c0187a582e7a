/* SPDX-License-Identifier: Apache-2.0 */
/* gpumem_protocol.h — how thawd talks to libthaw-cuda.so, the library it
 * preloads into GPU functions (interpose/, docs/DESIGN.md "GPU memory").
 *
 * thawd asks with a real-time signal carrying an operation and a sequence
 * number (sigqueue); the library answers with a status file, written whole
 * (temporary file, then rename) into its out directory as
 * <ns pid>.status: one JSON object that names the sequence it answers.  No
 * descriptor stays open between two operations, so CRIU dumps the process
 * with nothing of this channel in it.  Constants only: the library links
 * nothing of thaw's.
 */
#ifndef THAW_GPUMEM_PROTOCOL_H
#define THAW_GPUMEM_PROTOCOL_H

/* SIGRTMAX-4 on Linux: glibc keeps the first real-time signals for itself;
 * a function is unlikely to use this one (THAW_GPUMEM_SIGNAL changes it). */
#define GPUMEM_SIGNAL_DEFAULT 60

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

/* Inside the container. */
#define GPUMEM_LIB_NAME "libthaw-cuda.so"
#define GPUMEM_IN_DEST "/.thaw-gpu"      /* read-only: the library, the saved memory */
#define GPUMEM_OUT_DEST "/.thaw-gpu-out" /* writable: what a save writes, the answers */
#define GPUMEM_FILE_FMT "gpu-%d.mem"     /* per process, by its pid in the container */
#define GPUMEM_STATUS_FMT "%d.status"
/* Beside the saved memory, what thawd needs to fill device memory for a
 * restore itself: text, the first line GPUMEM_LAYOUT_MAGIC, then one line
 * per saved allocation: "<file offset> <size> <device ordinal>
 * <compression type> <GPUDirect RDMA capable> <usage>" (decimal). */
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

/* The environment thaw gives the function (the library reads it once). */
#define GPUMEM_ENV_IN "THAW_GPUMEM_IN"
#define GPUMEM_ENV_OUT "THAW_GPUMEM_OUT"
#define GPUMEM_ENV_SIGNAL "THAW_GPUMEM_SIGNAL"
/* Allocations smaller than this stay the driver's (default 2 MiB). */
#define GPUMEM_ENV_MIN_BYTES "THAW_GPUMEM_MIN_BYTES"

#endif
