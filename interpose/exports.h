/* SPDX-License-Identifier: Apache-2.0 */
/* exports.h — the names libthaw-cuda exports, in one list each, and the
 * gate's slot count.  Macros only: exports.S and gate.S include it too.
 *
 * A program linked against libcuda binds these names to the library first
 * (it is preloaded).  Three kinds:
 *   GM_EXPORTS_HELD  the driver's own entry point, reached through a slot
 *                    of the gate (exports.S): held while the memory is away;
 *   GM_EXPORTS_OWN   the library's implementation (alloc.c: the memory
 *                    calls, exported as aliases of what cuGetProcAddress
 *                    hands out for the same entry points; hook.c:
 *                    cuGetProcAddress itself);
 *   and dlsym (hook.c).
 * Nothing else is exported (test_gpumem compares the library's dynamic
 * symbols with these lists).  Which entry points are held is the list
 * below: every one that reads or writes device memory, queues work on a
 * stream, waits for it, or asks the driver about an address; each in its
 * per-thread-stream form too (_ptds, _ptsz), which a program built with
 * CUDA_API_PER_THREAD_DEFAULT_STREAM links.  A directly linked program's
 * call of any other entry point reaches the driver at once, held or not:
 * docs/DESIGN.md ("GPU memory", "What is not held") says what those are
 * and what that risks.
 */
#ifndef THAW_INTERPOSE_EXPORTS_H
#define THAW_INTERPOSE_EXPORTS_H

/* Trampolines of the gate (gate.S): the top GM_EXPORTS are the held
 * exports', the others are handed out by cuGetProcAddress and dlsym. */
#define GM_SLOTS 4096

/* A name and its per-thread-stream form: _ptsz for a call that takes a
 * stream, _ptds for one that uses the default stream. */
#define GM_PTSZ(X, sym) X(sym) X(sym##_ptsz)
#define GM_PTDS(X, sym) X(sym) X(sym##_ptds)
#define GM_EXPORTS_HELD(X) \
	/* Kernels and graphs */ \
	GM_PTSZ(X, cuLaunchKernel) GM_PTSZ(X, cuLaunchKernelEx) \
	GM_PTSZ(X, cuLaunchCooperativeKernel) GM_PTSZ(X, cuLaunchHostFunc) \
	GM_PTSZ(X, cuGraphLaunch) GM_PTSZ(X, cuGraphUpload) \
	X(cuLaunchCooperativeKernelMultiDevice) X(cuLaunch) X(cuLaunchGrid) \
	X(cuLaunchGridAsync) \
	/* Copies */ \
	GM_PTDS(X, cuMemcpy) GM_PTDS(X, cuMemcpyPeer) GM_PTDS(X, cuMemcpy3DPeer) \
	GM_PTDS(X, cuMemcpyHtoD_v2) GM_PTDS(X, cuMemcpyDtoH_v2) \
	GM_PTDS(X, cuMemcpyDtoD_v2) GM_PTDS(X, cuMemcpyDtoA_v2) \
	GM_PTDS(X, cuMemcpyAtoD_v2) GM_PTDS(X, cuMemcpyHtoA_v2) \
	GM_PTDS(X, cuMemcpyAtoH_v2) GM_PTDS(X, cuMemcpyAtoA_v2) \
	GM_PTDS(X, cuMemcpy2D_v2) GM_PTDS(X, cuMemcpy2DUnaligned_v2) \
	GM_PTDS(X, cuMemcpy3D_v2) \
	GM_PTSZ(X, cuMemcpyAsync) GM_PTSZ(X, cuMemcpyPeerAsync) \
	GM_PTSZ(X, cuMemcpy3DPeerAsync) GM_PTSZ(X, cuMemcpyHtoAAsync_v2) \
	GM_PTSZ(X, cuMemcpyAtoHAsync_v2) GM_PTSZ(X, cuMemcpyHtoDAsync_v2) \
	GM_PTSZ(X, cuMemcpyDtoHAsync_v2) GM_PTSZ(X, cuMemcpyDtoDAsync_v2) \
	GM_PTSZ(X, cuMemcpy2DAsync_v2) GM_PTSZ(X, cuMemcpy3DAsync_v2) \
	GM_PTSZ(X, cuMemcpyBatchAsync) GM_PTSZ(X, cuMemcpyBatchAsync_v2) \
	GM_PTSZ(X, cuMemcpy3DBatchAsync) GM_PTSZ(X, cuMemcpy3DBatchAsync_v2) \
	GM_PTSZ(X, cuMemBatchDecompressAsync) \
	/* Sets */ \
	GM_PTDS(X, cuMemsetD8_v2) GM_PTDS(X, cuMemsetD16_v2) GM_PTDS(X, cuMemsetD32_v2) \
	GM_PTDS(X, cuMemsetD2D8_v2) GM_PTDS(X, cuMemsetD2D16_v2) \
	GM_PTDS(X, cuMemsetD2D32_v2) \
	GM_PTSZ(X, cuMemsetD8Async) GM_PTSZ(X, cuMemsetD16Async) \
	GM_PTSZ(X, cuMemsetD32Async) GM_PTSZ(X, cuMemsetD2D8Async) \
	GM_PTSZ(X, cuMemsetD2D16Async) GM_PTSZ(X, cuMemsetD2D32Async) \
	/* Memory operations a stream carries */ \
	GM_PTSZ(X, cuStreamWriteValue32) GM_PTSZ(X, cuStreamWriteValue64) \
	GM_PTSZ(X, cuStreamWaitValue32) GM_PTSZ(X, cuStreamWaitValue64) \
	GM_PTSZ(X, cuStreamBatchMemOp) GM_PTSZ(X, cuStreamWriteValue32_v2) \
	GM_PTSZ(X, cuStreamWriteValue64_v2) GM_PTSZ(X, cuStreamWaitValue32_v2) \
	GM_PTSZ(X, cuStreamWaitValue64_v2) GM_PTSZ(X, cuStreamBatchMemOp_v2) \
	GM_PTSZ(X, cuSignalExternalSemaphoresAsync) \
	GM_PTSZ(X, cuWaitExternalSemaphoresAsync) GM_PTSZ(X, cuMemPrefetchAsync) \
	GM_PTSZ(X, cuMemPrefetchAsync_v2) GM_PTSZ(X, cuMemPrefetchBatchAsync) \
	GM_PTSZ(X, cuMemDiscardBatchAsync) \
	GM_PTSZ(X, cuMemDiscardAndPrefetchBatchAsync) \
	X(cuMemAdvise) X(cuMemAdvise_v2) \
	/* Waiting for work, ordering it */ \
	GM_PTSZ(X, cuStreamSynchronize) GM_PTSZ(X, cuStreamQuery) \
	GM_PTSZ(X, cuStreamWaitEvent) GM_PTSZ(X, cuStreamAddCallback) \
	GM_PTSZ(X, cuEventRecord) GM_PTSZ(X, cuEventRecordWithFlags) \
	X(cuEventSynchronize) X(cuEventQuery) X(cuCtxSynchronize) \
	X(cuCtxSynchronize_v2) \
	/* Questions about device memory, and objects made over it */ \
	X(cuPointerGetAttribute) X(cuPointerGetAttributes) X(cuPointerSetAttribute) \
	X(cuMemGetAddressRange_v2) X(cuMemRangeGetAttribute) X(cuMemRangeGetAttributes) \
	X(cuTexObjectCreate) X(cuSurfObjectCreate)

/* X(symbol, the library's function): alloc.c. */
#define GM_EXPORTS_OWN_MEM(X)                                                                \
	X(cuMemAlloc_v2, own_mem_alloc)                                                      \
	X(cuMemFree_v2, own_mem_free)                                                        \
	X(cuMemAllocAsync, own_alloc_async)                                                  \
	X(cuMemAllocAsync_ptsz, own_alloc_async_ptsz)                                        \
	X(cuMemAllocFromPoolAsync, own_alloc_pool)                                           \
	X(cuMemAllocFromPoolAsync_ptsz, own_alloc_pool_ptsz)                                 \
	X(cuMemFreeAsync, own_free_async)                                                    \
	X(cuMemFreeAsync_ptsz, own_free_async_ptsz)                                          \
	X(cuMemAllocManaged, own_alloc_managed)                                              \
	X(cuMemAllocPitch_v2, own_alloc_pitch)                                               \
	X(cuMemCreate, own_create)                                                           \
	X(cuMemRelease, own_release)                                                         \
	X(cuMemMap, own_map)                                                                 \
	X(cuMemUnmap, own_unmap)                                                             \
	X(cuMemSetAccess, own_set_access)                                                    \
	X(cuMemRetainAllocationHandle, own_retain_handle)                                    \
	X(cuMemGetAllocationPropertiesFromHandle, own_props_from_handle)                     \
	X(cuMemExportToShareableHandle, own_export_handle)                                   \
	X(cuMemImportFromShareableHandle, own_import_handle)
/* hook.c */
#define GM_EXPORTS_OWN_PROC(X)                                                               \
	X(cuGetProcAddress, own_getproc)                                                     \
	X(cuGetProcAddress_v2, own_getproc_v2)

#ifndef __ASSEMBLER__
/* How many held exports there are: the slots they take. */
#define GM_COUNT_ONE(sym) +1
enum { GM_EXPORTS = 0 GM_EXPORTS_HELD(GM_COUNT_ONE) };
#undef GM_COUNT_ONE
#endif

#endif
