/* SPDX-License-Identifier: Apache-2.0 */
/* gate.S — a trampoline per driver entry point, x86-64 System V.
 *
 * The function reaches each driver entry point through a slot: slot i puts
 * i in r11 (a scratch register no call passes arguments in) and jumps to
 * the common code, which counts the call as in flight and, while the gate
 * is open (and the slot has its driver address), calls gm_slot_real[i] with the caller's registers untouched and
 * its first 16 stack arguments copied (more than any driver call takes;
 * the words above the caller's are its own frame, always mapped), then
 * counts it out and returns its result.  Otherwise it calls gm_gate_slow
 * with every argument register saved, and tries again.  The count and the gate are read in the order that lets
 * gm_gate_close know, once the count is 0, that no call is inside the
 * driver and none will enter: a slot increments (a locked instruction, a
 * full barrier) before it reads the gate; the closer writes the gate
 * (xchg) before it reads the count.  Nothing of the entry point's type is
 * known here: that is the point, ~1,300 entry points share one path.
 */
#include "interpose/exports.h"

	.text

	.p2align 4
	.globl gm_common
	.hidden gm_common
	.type gm_common, @function
gm_common:
	lock incq gm_gate_inflight(%rip)
	cmpl $0, gm_gate_closed(%rip)
	jne .Lslow
	lea gm_slot_real(%rip), %rax
	cmpq $0, (%rax,%r11,8)
	je .Lslow
	push %rbp
	mov %rsp, %rbp
	push %r11
	sub $136, %rsp           /* 16-byte aligned for the call */
	xor %eax, %eax
1:	mov 16(%rbp,%rax,8), %r10
	mov %r10, (%rsp,%rax,8)
	inc %eax
	cmp $16, %eax
	jb 1b
	lea gm_slot_real(%rip), %rax
	call *(%rax,%r11,8)
	lock decq gm_gate_inflight(%rip)
	leave
	ret
.Lslow:
	/* The gate is closed, or an exported entry point's first call
	 * (exports.S) has no driver address yet: gm_gate_slow deals with
	 * both, every argument register saved, then the call starts over. */
	lock decq gm_gate_inflight(%rip)
	push %rdi
	push %rsi
	push %rdx
	push %rcx
	push %r8
	push %r9
	push %r11                /* 7 words: aligned again */
	sub $128, %rsp
	movdqu %xmm0, 0(%rsp)
	movdqu %xmm1, 16(%rsp)
	movdqu %xmm2, 32(%rsp)
	movdqu %xmm3, 48(%rsp)
	movdqu %xmm4, 64(%rsp)
	movdqu %xmm5, 80(%rsp)
	movdqu %xmm6, 96(%rsp)
	movdqu %xmm7, 112(%rsp)
	mov %r11, %rdi
	call gm_gate_slow
	movdqu 0(%rsp), %xmm0
	movdqu 16(%rsp), %xmm1
	movdqu 32(%rsp), %xmm2
	movdqu 48(%rsp), %xmm3
	movdqu 64(%rsp), %xmm4
	movdqu 80(%rsp), %xmm5
	movdqu 96(%rsp), %xmm6
	movdqu 112(%rsp), %xmm7
	add $128, %rsp
	pop %r11
	pop %r9
	pop %r8
	pop %rcx
	pop %rdx
	pop %rsi
	pop %rdi
	jmp gm_common
	.size gm_common, .-gm_common

/* GM_SLOTS (exports.h) slots of 16 bytes each. */
	.p2align 4
	.globl gm_slots
	.hidden gm_slots
	.type gm_slots, @function
gm_slots:
	.set slot, 0
	.rept GM_SLOTS
	.p2align 4
	movl $slot, %r11d
	jmp gm_common
	.set slot, slot + 1
	.endr
	.size gm_slots, .-gm_slots

	.section .note.GNU-stack,"",@progbits
