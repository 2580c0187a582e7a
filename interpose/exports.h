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

#define GM_EXPORTS_HELD(X) \
	/* Kernels and graphs */ \
	X(cuLaunchKernel) X(cuLaunchKernel_ptsz) X(cuLaunchKernelEx) \
	X(cuLaunchKernelEx_ptsz) X(cuLaunchCooperativeKernel) \
	X(cuLaunchCooperativeKernel_ptsz) X(cuLaunchCooperativeKernelMultiDevice) \
	X(cuLaunchHostFunc) X(cuLaunchHostFunc_ptsz) X(cuLaunch) X(cuLaunchGrid) \
	X(cuLaunchGridAsync) X(cuGraphLaunch) X(cuGraphLaunch_ptsz) X(cuGraphUpload) \
	X(cuGraphUpload_ptsz) \
	/* Copies */ \
	X(cuMemcpy) X(cuMemcpy_ptds) X(cuMemcpyAsync) X(cuMemcpyAsync_ptsz) \
	X(cuMemcpyPeer) X(cuMemcpyPeer_ptds) X(cuMemcpyPeerAsync) \
	X(cuMemcpyPeerAsync_ptsz) X(cuMemcpy3DPeer) X(cuMemcpy3DPeer_ptds) \
	X(cuMemcpy3DPeerAsync) X(cuMemcpy3DPeerAsync_ptsz) X(cuMemcpyHtoD_v2) \
	X(cuMemcpyHtoD_v2_ptds) X(cuMemcpyDtoH_v2) X(cuMemcpyDtoH_v2_ptds) \
	X(cuMemcpyDtoD_v2) X(cuMemcpyDtoD_v2_ptds) X(cuMemcpyDtoA_v2) \
	X(cuMemcpyDtoA_v2_ptds) X(cuMemcpyAtoD_v2) X(cuMemcpyAtoD_v2_ptds) \
	X(cuMemcpyHtoA_v2) X(cuMemcpyHtoA_v2_ptds) X(cuMemcpyAtoH_v2) \
	X(cuMemcpyAtoH_v2_ptds) X(cuMemcpyAtoA_v2) X(cuMemcpyAtoA_v2_ptds) \
	X(cuMemcpyHtoAAsync_v2) X(cuMemcpyHtoAAsync_v2_ptsz) X(cuMemcpyAtoHAsync_v2) \
	X(cuMemcpyAtoHAsync_v2_ptsz) X(cuMemcpy2D_v2) X(cuMemcpy2D_v2_ptds) \
	X(cuMemcpy2DUnaligned_v2) X(cuMemcpy2DUnaligned_v2_ptds) X(cuMemcpy3D_v2) \
	X(cuMemcpy3D_v2_ptds) X(cuMemcpyHtoDAsync_v2) X(cuMemcpyHtoDAsync_v2_ptsz) \
	X(cuMemcpyDtoHAsync_v2) X(cuMemcpyDtoHAsync_v2_ptsz) X(cuMemcpyDtoDAsync_v2) \
	X(cuMemcpyDtoDAsync_v2_ptsz) X(cuMemcpy2DAsync_v2) X(cuMemcpy2DAsync_v2_ptsz) \
	X(cuMemcpy3DAsync_v2) X(cuMemcpy3DAsync_v2_ptsz) X(cuMemcpyBatchAsync) \
	X(cuMemcpyBatchAsync_ptsz) X(cuMemcpyBatchAsync_v2) \
	X(cuMemcpyBatchAsync_v2_ptsz) X(cuMemcpy3DBatchAsync) \
	X(cuMemcpy3DBatchAsync_ptsz) X(cuMemcpy3DBatchAsync_v2) \
	X(cuMemcpy3DBatchAsync_v2_ptsz) X(cuMemBatchDecompressAsync) \
	X(cuMemBatchDecompressAsync_ptsz) \
	/* Sets */ \
	X(cuMemsetD8_v2) X(cuMemsetD8_v2_ptds) X(cuMemsetD16_v2) X(cuMemsetD16_v2_ptds) \
	X(cuMemsetD32_v2) X(cuMemsetD32_v2_ptds) X(cuMemsetD2D8_v2) \
	X(cuMemsetD2D8_v2_ptds) X(cuMemsetD2D16_v2) X(cuMemsetD2D16_v2_ptds) \
	X(cuMemsetD2D32_v2) X(cuMemsetD2D32_v2_ptds) X(cuMemsetD8Async) \
	X(cuMemsetD8Async_ptsz) X(cuMemsetD16Async) X(cuMemsetD16Async_ptsz) \
	X(cuMemsetD32Async) X(cuMemsetD32Async_ptsz) X(cuMemsetD2D8Async) \
	X(cuMemsetD2D8Async_ptsz) X(cuMemsetD2D16Async) X(cuMemsetD2D16Async_ptsz) \
	X(cuMemsetD2D32Async) X(cuMemsetD2D32Async_ptsz) \
	/* Memory operations a stream carries */ \
	X(cuStreamWriteValue32) X(cuStreamWriteValue32_ptsz) X(cuStreamWriteValue64) \
	X(cuStreamWriteValue64_ptsz) X(cuStreamWaitValue32) X(cuStreamWaitValue32_ptsz) \
	X(cuStreamWaitValue64) X(cuStreamWaitValue64_ptsz) X(cuStreamBatchMemOp) \
	X(cuStreamBatchMemOp_ptsz) X(cuStreamWriteValue32_v2) \
	X(cuStreamWriteValue32_v2_ptsz) X(cuStreamWriteValue64_v2) \
	X(cuStreamWriteValue64_v2_ptsz) X(cuStreamWaitValue32_v2) \
	X(cuStreamWaitValue32_v2_ptsz) X(cuStreamWaitValue64_v2) \
	X(cuStreamWaitValue64_v2_ptsz) X(cuStreamBatchMemOp_v2) \
	X(cuStreamBatchMemOp_v2_ptsz) X(cuSignalExternalSemaphoresAsync) \
	X(cuSignalExternalSemaphoresAsync_ptsz) X(cuWaitExternalSemaphoresAsync) \
	X(cuWaitExternalSemaphoresAsync_ptsz) X(cuMemPrefetchAsync) \
	X(cuMemPrefetchAsync_ptsz) X(cuMemPrefetchAsync_v2) \
	X(cuMemPrefetchAsync_v2_ptsz) X(cuMemPrefetchBatchAsync) \
	X(cuMemPrefetchBatchAsync_ptsz) X(cuMemDiscardBatchAsync) \
	X(cuMemDiscardBatchAsync_ptsz) X(cuMemDiscardAndPrefetchBatchAsync) \
	X(cuMemDiscardAndPrefetchBatchAsync_ptsz) X(cuMemAdvise) X(cuMemAdvise_v2) \
	/* Waiting for work, ordering it */ \
	X(cuStreamSynchronize) X(cuStreamSynchronize_ptsz) X(cuStreamQuery) \
	X(cuStreamQuery_ptsz) X(cuStreamWaitEvent) X(cuStreamWaitEvent_ptsz) \
	X(cuStreamAddCallback) X(cuStreamAddCallback_ptsz) X(cuEventRecord) \
	X(cuEventRecord_ptsz) X(cuEventRecordWithFlags) X(cuEventRecordWithFlags_ptsz) \
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
