/* SPDX-License-Identifier: Apache-2.0 */
/* exports.S — the driver's entry points a program linked against libcuda
 * calls by name, held by the gate like those it resolves at run time
 * (hook.c).  Each name of GM_EXPORTS_HELD (exports.h, which says which
 * and why) is a slot of its own at the top of the slot table, the k-th
 * name slot GM_SLOTS - 1 - k, whose driver address gm_exports_resolve
 * fills in by name (hook.c, gm_common's first call through a slot still
 * empty).
 */
#include "interpose/exports.h"

	.set gm_export_k, 0
#define HELD(name)                                        \
	.globl name;                                      \
	.type name, @function;                            \
	.p2align 4;                                       \
name:                                                     \
	movl $(GM_SLOTS - 1 - gm_export_k), %r11d;        \
	jmp gm_common;                                    \
	.size name, .-name;                               \
	.set gm_export_k, gm_export_k + 1;

	.text
	GM_EXPORTS_HELD(HELD)

	.section .note.GNU-stack,"",@progbits
