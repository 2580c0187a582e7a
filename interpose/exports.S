/* SPDX-License-Identifier: Apache-2.0 */
/* exports.S — the driver's entry points a program linked against libcuda
 * calls by name, held by the gate like those it resolves at run time
 * (hook.c).  Each is a slot of its own at the top of the slot table, whose
 * driver address gm_exports_resolve fills in by name (hook.c, gm_common's
 * first call through a slot still empty).  The memory calls are alloc.c's.
 * The list is the calls a program does work with: launches, copies, sets,
 * synchronisation; an entry point not listed reaches the driver directly
 * (correct, only not held).
 */
#define EXPORT(name, k)                  \
	.globl name;                     \
	.type name, @function;           \
	.p2align 4;                      \
name:                                    \
	movl $(4095 - (k)), %r11d;       \
	jmp gm_common;                   \
	.size name, .-name

	.text
	EXPORT(cuLaunchKernel, 0)
	EXPORT(cuLaunchKernelEx, 1)
	EXPORT(cuLaunchCooperativeKernel, 2)
	EXPORT(cuGraphLaunch, 3)
	EXPORT(cuMemcpy, 4)
	EXPORT(cuMemcpyAsync, 5)
	EXPORT(cuMemcpyHtoD_v2, 6)
	EXPORT(cuMemcpyDtoH_v2, 7)
	EXPORT(cuMemcpyDtoD_v2, 8)
	EXPORT(cuMemcpyHtoDAsync_v2, 9)
	EXPORT(cuMemcpyDtoHAsync_v2, 10)
	EXPORT(cuMemcpyDtoDAsync_v2, 11)
	EXPORT(cuMemcpy2D_v2, 12)
	EXPORT(cuMemcpy2DAsync_v2, 13)
	EXPORT(cuMemcpy3D_v2, 14)
	EXPORT(cuMemcpy3DAsync_v2, 15)
	EXPORT(cuMemsetD8_v2, 16)
	EXPORT(cuMemsetD16_v2, 17)
	EXPORT(cuMemsetD32_v2, 18)
	EXPORT(cuMemsetD8Async, 19)
	EXPORT(cuMemsetD16Async, 20)
	EXPORT(cuMemsetD32Async, 21)
	EXPORT(cuStreamSynchronize, 22)
	EXPORT(cuCtxSynchronize, 23)
	EXPORT(cuEventRecord, 24)
	EXPORT(cuEventSynchronize, 25)
	EXPORT(cuStreamWaitEvent, 26)
	EXPORT(cuMemPrefetchAsync, 27)

	.section .note.GNU-stack,"",@progbits
