/* SPDX-License-Identifier: Apache-2.0 */
/* sigbus.c — see sigbus.h. */
#define LOG_PREFIX "sigbus: "
#include "common/sigbus.h"
#include "common/log.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>

static __thread sigjmp_buf *guard; /* set while this thread runs a guarded fn */
static struct sigaction before;	   /* the action we chain to outside a guard */
static pthread_once_t install_once = PTHREAD_ONCE_INIT;
static int install_err;

static void on_sigbus(int sig, siginfo_t *info, void *uctx)
{
	if (guard)
		siglongjmp(*guard, 1);
	if (before.sa_flags & SA_SIGINFO) {
		before.sa_sigaction(sig, info, uctx);
		return;
	}
	if (before.sa_handler != SIG_DFL && before.sa_handler != SIG_IGN) {
		before.sa_handler(sig);
		return;
	}
	/* Returning re-runs the faulting access, which now gets the old action
	 * (the default: the process dies with SIGBUS, core and all). */
	sigaction(SIGBUS, &before, NULL);
}

static void install(void)
{
	/* SA_NODEFER: the jump out of the handler skips the mask's restore, so
	 * SIGBUS must not be blocked while it runs. */
	struct sigaction sa = {.sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO | SA_NODEFER};

	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGBUS, &sa, &before) < 0) {
		install_err = -errno;
		pr_perror("cannot install the SIGBUS handler");
	}
}

int sigbus_guarded(int (*fn)(void *arg), void *arg)
{
	sigjmp_buf env;
	int ret;

	pthread_once(&install_once, install);
	if (install_err)
		return install_err;
	/* No signal mask to save: nothing is blocked by the handler (SA_NODEFER). */
	if (sigsetjmp(env, 0)) {
		guard = NULL;
		return -EFAULT;
	}
	guard = &env;
	ret = fn(arg);
	guard = NULL;
	return ret;
}
