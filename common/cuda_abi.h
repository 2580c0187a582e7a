/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_abi.h — the part of the CUDA driver's ABI thaw uses, written out
 * once: its types, the layouts of the structs it passes, its constants and
 * the signature of every entry point thaw calls or implements.  thaw builds
 * where there is no CUDA at all (CI, the development machines), so nothing
 * includes cuda.h; thawd (common/cuda.c, restore/gpu_prefill.c),
 * libthaw-cuda (interpose/) and the fake driver of the tests
 * (test/cuda_mock.c) all take the driver's ABI from here.
 *
 * The names are thaw's (cu_…, CU_…), not cuda.h's, so that this header and
 * cuda.h can be compiled side by side: with -DTHAW_CUDA_LAYOUT_CHECK and
 * cuda.h on the include path (test_cuda does it where cuda.h is), every
 * size, offset, constant and entry point's type below is checked against
 * the real header.  Without it, each size and offset is still checked
 * against the number cuda.h (CUDA 12.8 to 13.0, x86-64) gives, as CRIU's
 * CUDA plugin checks its own copies: a layout edited by mistake does not
 * build.  Field names are cuda.h's.
 *
 * Constants only, types and macros: libthaw-cuda includes it and links
 * nothing of thaw's.
 */
#ifndef THAW_CUDA_ABI_H
#define THAW_CUDA_ABI_H

#include <stddef.h>
#include <stdint.h>

/* Device ordinals thaw keeps per-device figures for (thaw's bound, not
 * the driver's: a snapshot's GPU memory, a status's bytes per device). */
#define CUDA_MAX_DEVICES 16

/* --- types --- */
typedef int cu_result;                 /* CUresult (an enum) */
typedef int cu_device;                 /* CUdevice */
typedef unsigned long long cu_ptr;     /* CUdeviceptr */
typedef unsigned long long cu_handle;  /* CUmemGenericAllocationHandle */
typedef uint64_t cu_u64;               /* cuuint64_t */
typedef struct CUctx_st *cu_ctx;       /* CUcontext: the driver's own tags */
typedef struct CUstream_st *cu_stream; /* CUstream */
typedef struct CUmemPoolHandle_st *cu_pool; /* CUmemoryPool */
/* Enums of cuda.h passed by value or pointer: int-sized. */
typedef int cu_attr;        /* CUdevice_attribute */
typedef int cu_gran_flags;  /* CUmemAllocationGranularity_flags */
typedef int cu_handle_type; /* CUmemAllocationHandleType */
typedef int cu_proc_state;  /* CUprocessState */
typedef int cu_proc_query;  /* CUdriverProcAddressQueryResult */
typedef int cu_access_flags; /* CUmemAccess_flags */
typedef int cu_loc_type;    /* CUmemLocationType */
typedef int cu_alloc_type;  /* CUmemAllocationType */

typedef struct cu_uuid {
	unsigned char bytes[16];
} cu_uuid; /* CUuuid */

typedef struct cu_mem_location {
	cu_loc_type type; /* CU_LOC_DEVICE */
	int id;
} cu_mem_location; /* CUmemLocation */

typedef struct cu_mem_prop {
	cu_alloc_type type;                  /* CU_ALLOC_PINNED */
	cu_handle_type requestedHandleTypes; /* 0: none */
	cu_mem_location location;
	void *win32HandleMetaData;
	struct {
		unsigned char compressionType;
		unsigned char gpuDirectRDMACapable;
		unsigned short usage;
		unsigned char reserved[4];
	} allocFlags;
} cu_mem_prop; /* CUmemAllocationProp */

typedef struct cu_access_desc {
	cu_mem_location location;
	cu_access_flags flags; /* CU_ACCESS_RW */
} cu_access_desc; /* CUmemAccessDesc */

/* The checkpoint API's arguments; reserved fields must be zero. */
typedef struct cu_lock_args {
	unsigned int timeoutMs;
	unsigned int reserved0;
	cu_u64 reserved1[7];
} cu_lock_args; /* CUcheckpointLockArgs */

typedef struct cu_checkpoint_args {
	cu_u64 reserved[8];
} cu_checkpoint_args; /* CUcheckpointCheckpointArgs */

typedef struct cu_gpu_pair {
	cu_uuid oldUuid;
	cu_uuid newUuid;
} cu_gpu_pair; /* CUcheckpointGpuPair */

typedef struct cu_restore_args {
	cu_gpu_pair *gpuPairs;
	unsigned int gpuPairsCount;
	char reserved[52 - sizeof(cu_gpu_pair *)];
	cu_u64 reserved1;
} cu_restore_args; /* CUcheckpointRestoreArgs */

typedef struct cu_unlock_args {
	cu_u64 reserved[8];
} cu_unlock_args; /* CUcheckpointUnlockArgs */

/* --- constants (cuda.h's name beside each) --- */
enum {
	CU_SUCCESS = 0,                /* CUDA_SUCCESS */
	CU_ERR_INVALID_VALUE = 1,      /* CUDA_ERROR_INVALID_VALUE */
	CU_ERR_OUT_OF_MEMORY = 2,      /* CUDA_ERROR_OUT_OF_MEMORY */
	CU_ERR_NOT_INITIALIZED = 3,    /* CUDA_ERROR_NOT_INITIALIZED */
	CU_ERR_DEINITIALIZED = 4,      /* CUDA_ERROR_DEINITIALIZED */
	CU_ERR_NO_DEVICE = 100,        /* CUDA_ERROR_NO_DEVICE */
	CU_ERR_INVALID_DEVICE = 101,   /* CUDA_ERROR_INVALID_DEVICE */
	CU_ERR_ILLEGAL_STATE = 401,    /* CUDA_ERROR_ILLEGAL_STATE */
	CU_ERR_NOT_FOUND = 500,        /* CUDA_ERROR_NOT_FOUND */
	CU_ERR_NOT_PERMITTED = 800,    /* CUDA_ERROR_NOT_PERMITTED */
	CU_ERR_NOT_SUPPORTED = 801,    /* CUDA_ERROR_NOT_SUPPORTED */
	CU_ERR_TIMEOUT = 909,          /* CUDA_ERROR_TIMEOUT */

	CU_ALLOC_PINNED = 1,        /* CU_MEM_ALLOCATION_TYPE_PINNED */
	CU_LOC_DEVICE = 1,          /* CU_MEM_LOCATION_TYPE_DEVICE */
	CU_ACCESS_RW = 3,           /* CU_MEM_ACCESS_FLAGS_PROT_READWRITE */
	CU_GRAN_MINIMUM = 0,        /* CU_MEM_ALLOC_GRANULARITY_MINIMUM */
	CU_HANDLE_POSIX_FD = 1,     /* CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR */
	CU_HOSTREG_PORTABLE = 0x01, /* CU_MEMHOSTREGISTER_PORTABLE */
	CU_HOSTREG_READ_ONLY = 0x08, /* CU_MEMHOSTREGISTER_READ_ONLY */
	CU_STREAM_NONBLOCKING = 1,  /* CU_STREAM_NON_BLOCKING */
	CU_ATTR_CC_MAJOR = 75,      /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
	CU_ATTR_CC_MINOR = 76,      /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR */
	CU_PROC_RUNNING = 0,        /* CU_PROCESS_STATE_RUNNING */
	CU_PROC_LOCKED = 1,         /* CU_PROCESS_STATE_LOCKED */
	CU_PROC_CHECKPOINTED = 2,   /* CU_PROCESS_STATE_CHECKPOINTED */
	CU_PROC_FAILED = 3,         /* CU_PROCESS_STATE_FAILED */
};

/* --- entry points: X(symbol, parameters), every one returning cu_result.
 * The symbol is the one libcuda exports (cuMemAlloc_v2, not the cuMemAlloc
 * of cuda.h's macros).  Each gets a function type, cu_fn_<symbol>. --- */
#define CU_ENTRY_POINTS(X)                                                                   \
	X(cuInit, (unsigned int flags))                                                      \
	X(cuGetErrorName, (cu_result error, const char **str))                               \
	X(cuDriverGetVersion, (int *version))                                                \
	X(cuDeviceGetCount, (int *count))                                                    \
	X(cuDeviceGet, (cu_device *dev, int ordinal))                                        \
	X(cuDeviceGetName, (char *name, int len, cu_device dev))                             \
	X(cuDeviceGetUuid, (cu_uuid *uuid, cu_device dev))                                   \
	X(cuDeviceGetUuid_v2, (cu_uuid *uuid, cu_device dev))                                \
	X(cuDeviceTotalMem_v2, (size_t *bytes, cu_device dev))                               \
	X(cuDeviceGetAttribute, (int *value, cu_attr attr, cu_device dev))                   \
	X(cuDeviceCanAccessPeer, (int *can, cu_device dev, cu_device peer))                  \
	X(cuDevicePrimaryCtxRetain, (cu_ctx *ctx, cu_device dev))                            \
	X(cuCtxGetCurrent, (cu_ctx *ctx))                                                    \
	X(cuCtxSetCurrent, (cu_ctx ctx))                                                     \
	X(cuCtxGetDevice, (cu_device *dev))                                                  \
	X(cuCtxSynchronize, (void))                                                          \
	X(cuCheckpointProcessGetState, (int pid, cu_proc_state *state))                      \
	X(cuCheckpointProcessGetRestoreThreadId, (int pid, int *tid))                        \
	X(cuCheckpointProcessLock, (int pid, cu_lock_args *args))                            \
	X(cuCheckpointProcessCheckpoint, (int pid, cu_checkpoint_args *args))                \
	X(cuCheckpointProcessRestore, (int pid, cu_restore_args *args))                      \
	X(cuCheckpointProcessUnlock, (int pid, cu_unlock_args *args))                        \
	X(cuGetProcAddress_v2, (const char *symbol, void **pfn, int version, cu_u64 flags,   \
				cu_proc_query *status))                                      \
	X(cuMemAlloc_v2, (cu_ptr *dptr, size_t bytes))                                       \
	X(cuMemFree_v2, (cu_ptr dptr))                                                       \
	X(cuMemAllocAsync, (cu_ptr *dptr, size_t bytes, cu_stream stream))                   \
	X(cuMemAllocAsync_ptsz, (cu_ptr *dptr, size_t bytes, cu_stream stream))              \
	X(cuMemAllocFromPoolAsync, (cu_ptr *dptr, size_t bytes, cu_pool pool, cu_stream stream)) \
	X(cuMemAllocFromPoolAsync_ptsz,                                                      \
	  (cu_ptr *dptr, size_t bytes, cu_pool pool, cu_stream stream))                      \
	X(cuMemFreeAsync, (cu_ptr dptr, cu_stream stream))                                   \
	X(cuMemFreeAsync_ptsz, (cu_ptr dptr, cu_stream stream))                              \
	X(cuMemAllocManaged, (cu_ptr *dptr, size_t bytes, unsigned int flags))               \
	X(cuMemAllocPitch_v2, (cu_ptr *dptr, size_t *pitch, size_t width, size_t height,     \
			       unsigned int elem))                                           \
	X(cuMemAddressReserve, (cu_ptr *ptr, size_t size, size_t align, cu_ptr addr,         \
				unsigned long long flags))                                   \
	X(cuMemAddressFree, (cu_ptr ptr, size_t size))                                       \
	X(cuMemCreate, (cu_handle *handle, size_t size, const cu_mem_prop *prop,             \
			unsigned long long flags))                                           \
	X(cuMemRelease, (cu_handle handle))                                                  \
	X(cuMemMap, (cu_ptr ptr, size_t size, size_t offset, cu_handle handle,               \
		     unsigned long long flags))                                              \
	X(cuMemUnmap, (cu_ptr ptr, size_t size))                                             \
	X(cuMemSetAccess, (cu_ptr ptr, size_t size, const cu_access_desc *desc, size_t count)) \
	X(cuMemRetainAllocationHandle, (cu_handle *handle, void *addr))                      \
	X(cuMemGetAllocationPropertiesFromHandle, (cu_mem_prop *prop, cu_handle handle))     \
	X(cuMemExportToShareableHandle, (void *out, cu_handle handle, cu_handle_type type,   \
					 unsigned long long flags))                          \
	X(cuMemImportFromShareableHandle, (cu_handle *handle, void *os, cu_handle_type type)) \
	X(cuMemGetAllocationGranularity, (size_t *gran, const cu_mem_prop *prop,             \
					  cu_gran_flags option))                             \
	X(cuMemcpyDtoH_v2, (void *dst, cu_ptr src, size_t bytes))                            \
	X(cuMemcpyHtoD_v2, (cu_ptr dst, const void *src, size_t bytes))                      \
	X(cuMemcpyHtoDAsync_v2, (cu_ptr dst, const void *src, size_t bytes, cu_stream stream)) \
	X(cuMemsetD32_v2, (cu_ptr dst, unsigned int value, size_t count))                    \
	X(cuMemHostRegister_v2, (void *p, size_t bytes, unsigned int flags))                 \
	X(cuMemHostUnregister, (void *p))                                                    \
	X(cuMemAllocHost_v2, (void **p, size_t bytes))                                       \
	X(cuMemFreeHost, (void *p))                                                          \
	X(cuStreamCreate, (cu_stream *stream, unsigned int flags))                           \
	X(cuStreamSynchronize, (cu_stream stream))                                           \
	X(cuStreamDestroy_v2, (cu_stream stream))
/* Not in cuda.h outside the driver's own build, so not checked against it:
 * the 4-argument cuGetProcAddress the CUDA runtime asks for at 11030. */
#define CU_ENTRY_POINTS_UNCHECKED(X)                                                         \
	X(cuGetProcAddress, (const char *symbol, void **pfn, int version, cu_u64 flags))

#define CU_FN_TYPEDEF(sym, params) typedef cu_result cu_fn_##sym params;
CU_ENTRY_POINTS(CU_FN_TYPEDEF)
CU_ENTRY_POINTS_UNCHECKED(CU_FN_TYPEDEF)
#undef CU_FN_TYPEDEF

/* --- layouts: S(type, size) and F(type, field, offset, size), cuda.h's
 * figures for x86-64; each checked here, and against cuda.h below. --- */
#define CU_ABI_STRUCTS(S)                                                                    \
	S(cu_uuid, 16)                                                                       \
	S(cu_mem_location, 8)                                                                \
	S(cu_mem_prop, 32)                                                                   \
	S(cu_access_desc, 12)                                                                \
	S(cu_lock_args, 64)                                                                  \
	S(cu_checkpoint_args, 64)                                                            \
	S(cu_gpu_pair, 32)                                                                   \
	S(cu_restore_args, 64)                                                               \
	S(cu_unlock_args, 64)
#define CU_ABI_FIELDS(F)                                                                     \
	F(cu_uuid, bytes, 0, 16)                                                             \
	F(cu_mem_location, type, 0, 4)                                                       \
	F(cu_mem_location, id, 4, 4)                                                         \
	F(cu_mem_prop, type, 0, 4)                                                           \
	F(cu_mem_prop, requestedHandleTypes, 4, 4)                                           \
	F(cu_mem_prop, location, 8, 8)                                                       \
	F(cu_mem_prop, win32HandleMetaData, 16, 8)                                           \
	F(cu_mem_prop, allocFlags, 24, 8)                                                    \
	F(cu_mem_prop, allocFlags.compressionType, 24, 1)                                    \
	F(cu_mem_prop, allocFlags.gpuDirectRDMACapable, 25, 1)                               \
	F(cu_mem_prop, allocFlags.usage, 26, 2)                                              \
	F(cu_mem_prop, allocFlags.reserved, 28, 4)                                           \
	F(cu_access_desc, location, 0, 8)                                                    \
	F(cu_access_desc, flags, 8, 4)                                                       \
	F(cu_lock_args, timeoutMs, 0, 4)                                                     \
	F(cu_lock_args, reserved0, 4, 4)                                                     \
	F(cu_lock_args, reserved1, 8, 56)                                                    \
	F(cu_checkpoint_args, reserved, 0, 64)                                               \
	F(cu_gpu_pair, oldUuid, 0, 16)                                                       \
	F(cu_gpu_pair, newUuid, 16, 16)                                                      \
	F(cu_restore_args, gpuPairs, 0, 8)                                                   \
	F(cu_restore_args, gpuPairsCount, 8, 4)                                              \
	F(cu_restore_args, reserved, 12, 44)                                                 \
	F(cu_restore_args, reserved1, 56, 8)                                                 \
	F(cu_unlock_args, reserved, 0, 64)

#define CU_FIELD_SIZE(t, f) sizeof(((t *)0)->f)
#define CU_ASSERT_SIZE(t, size) _Static_assert(sizeof(t) == (size), #t " is not " #size " bytes");
#define CU_ASSERT_FIELD(t, f, off, size)                                                     \
	_Static_assert(offsetof(t, f) == (off), #t "." #f " is not at " #off);                \
	_Static_assert(CU_FIELD_SIZE(t, f) == (size), #t "." #f " is not " #size " bytes");
CU_ABI_STRUCTS(CU_ASSERT_SIZE)
CU_ABI_FIELDS(CU_ASSERT_FIELD)
#undef CU_ASSERT_SIZE
#undef CU_ASSERT_FIELD

#ifdef THAW_CUDA_LAYOUT_CHECK
/* Against the real header: `cc -fsyntax-only -DTHAW_CUDA_LAYOUT_CHECK
 * -I<cuda>/include -x c common/cuda_abi.h` (test_cuda). */
#include <cuda.h>
#define CU_THEIRS_cu_uuid CUuuid
#define CU_THEIRS_cu_mem_location CUmemLocation
#define CU_THEIRS_cu_mem_prop CUmemAllocationProp
#define CU_THEIRS_cu_access_desc CUmemAccessDesc
#define CU_THEIRS_cu_lock_args CUcheckpointLockArgs
#define CU_THEIRS_cu_checkpoint_args CUcheckpointCheckpointArgs
#define CU_THEIRS_cu_gpu_pair CUcheckpointGpuPair
#define CU_THEIRS_cu_restore_args CUcheckpointRestoreArgs
#define CU_THEIRS_cu_unlock_args CUcheckpointUnlockArgs
#define CU_SAME_SIZE(t, size)                                                                \
	_Static_assert(sizeof(t) == sizeof(CU_THEIRS_##t), #t " differs from cuda.h's");
#define CU_SAME_FIELD(t, f, off, size)                                                       \
	_Static_assert(offsetof(t, f) == offsetof(CU_THEIRS_##t, f), #t "." #f " moved");     \
	_Static_assert(CU_FIELD_SIZE(t, f) == CU_FIELD_SIZE(CU_THEIRS_##t, f),                \
		       #t "." #f " changed size");
CU_ABI_STRUCTS(CU_SAME_SIZE)
CU_ABI_FIELDS(CU_SAME_FIELD)
#define CU_SAME_VALUE(ours, theirs) _Static_assert((int)(ours) == (int)(theirs), #ours);
#define CU_ABI_VALUES(V)                                                                     \
	V(CU_SUCCESS, CUDA_SUCCESS)                                                          \
	V(CU_ERR_INVALID_VALUE, CUDA_ERROR_INVALID_VALUE)                                    \
	V(CU_ERR_OUT_OF_MEMORY, CUDA_ERROR_OUT_OF_MEMORY)                                    \
	V(CU_ERR_NOT_INITIALIZED, CUDA_ERROR_NOT_INITIALIZED)                                \
	V(CU_ERR_DEINITIALIZED, CUDA_ERROR_DEINITIALIZED)                                    \
	V(CU_ERR_NO_DEVICE, CUDA_ERROR_NO_DEVICE)                                            \
	V(CU_ERR_INVALID_DEVICE, CUDA_ERROR_INVALID_DEVICE)                                  \
	V(CU_ERR_ILLEGAL_STATE, CUDA_ERROR_ILLEGAL_STATE)                                    \
	V(CU_ERR_NOT_FOUND, CUDA_ERROR_NOT_FOUND)                                            \
	V(CU_ERR_NOT_PERMITTED, CUDA_ERROR_NOT_PERMITTED)                                    \
	V(CU_ERR_NOT_SUPPORTED, CUDA_ERROR_NOT_SUPPORTED)                                    \
	V(CU_ERR_TIMEOUT, CUDA_ERROR_TIMEOUT)                                                \
	V(CU_ALLOC_PINNED, CU_MEM_ALLOCATION_TYPE_PINNED)                                    \
	V(CU_LOC_DEVICE, CU_MEM_LOCATION_TYPE_DEVICE)                                        \
	V(CU_ACCESS_RW, CU_MEM_ACCESS_FLAGS_PROT_READWRITE)                                  \
	V(CU_GRAN_MINIMUM, CU_MEM_ALLOC_GRANULARITY_MINIMUM)                                 \
	V(CU_HANDLE_POSIX_FD, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)                      \
	V(CU_HOSTREG_PORTABLE, CU_MEMHOSTREGISTER_PORTABLE)                                  \
	V(CU_HOSTREG_READ_ONLY, CU_MEMHOSTREGISTER_READ_ONLY)                                \
	V(CU_STREAM_NONBLOCKING, CU_STREAM_NON_BLOCKING)                                     \
	V(CU_ATTR_CC_MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)                    \
	V(CU_ATTR_CC_MINOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)                    \
	V(CU_PROC_RUNNING, CU_PROCESS_STATE_RUNNING)                                         \
	V(CU_PROC_LOCKED, CU_PROCESS_STATE_LOCKED)                                           \
	V(CU_PROC_CHECKPOINTED, CU_PROCESS_STATE_CHECKPOINTED)                               \
	V(CU_PROC_FAILED, CU_PROCESS_STATE_FAILED)
CU_ABI_VALUES(CU_SAME_VALUE)
_Static_assert(sizeof(cu_ptr) == sizeof(CUdeviceptr), "CUdeviceptr");
_Static_assert(sizeof(cu_handle) == sizeof(CUmemGenericAllocationHandle), "handle");
_Static_assert(sizeof(cu_result) == sizeof(CUresult), "CUresult");
/* Each entry point's type, with cuda.h's types put in for ours: the
 * parameters' number, order and types.  (The _ptsz entry points are
 * declared by cuda.h only for per-thread-stream builds: checked as the
 * plain ones, which they are but for the stream they default to.) */
#define cu_result CUresult
#define cu_device CUdevice
#define cu_ptr CUdeviceptr
#define cu_handle CUmemGenericAllocationHandle
#define cu_u64 cuuint64_t
#define cu_ctx CUcontext
#define cu_stream CUstream
#define cu_pool CUmemoryPool
#define cu_attr CUdevice_attribute
#define cu_gran_flags CUmemAllocationGranularity_flags
#define cu_handle_type CUmemAllocationHandleType
#define cu_proc_state CUprocessState
#define cu_proc_query CUdriverProcAddressQueryResult
#define cu_uuid CUuuid
#define cu_mem_prop CUmemAllocationProp
#define cu_access_desc CUmemAccessDesc
#define cu_lock_args CUcheckpointLockArgs
#define cu_checkpoint_args CUcheckpointCheckpointArgs
#define cu_restore_args CUcheckpointRestoreArgs
#define cu_unlock_args CUcheckpointUnlockArgs
#define cuMemAllocAsync_ptsz cuMemAllocAsync
#define cuMemAllocFromPoolAsync_ptsz cuMemAllocFromPoolAsync
#define cuMemFreeAsync_ptsz cuMemFreeAsync
#define CU_SAME_ENTRY(sym, params)                                                           \
	_Static_assert(__builtin_types_compatible_p(__typeof__(sym), CUresult params),        \
		       #sym "'s type differs from cuda.h's");
CU_ENTRY_POINTS(CU_SAME_ENTRY)
#endif /* THAW_CUDA_LAYOUT_CHECK */

#endif
