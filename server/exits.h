/* SPDX-License-Identifier: Apache-2.0 */
/* exits.h — how an instance's first process ended: its wait status.
 *
 * Only a parent learns how a process ended, and an instance's first process
 * has none in thawd: `runc restore --detach` and CRIU leave it, once they
 * exit, to the nearest child subreaper above them, init by default.  So
 * thawd splits in two before anything else: a small keeper process (the
 * one started, whose pid the caller holds) makes itself a child subreaper
 * and forks the server.  Every process the server leaves behind (instances'
 * first processes, the endpoint shims and lease holders it double-forks)
 * is then the keeper's when it is orphaned; the keeper reaps each and sends
 * the server its pid, start time and wait status over a pipe.  The server's
 * own children stay its own, waited for where they are spawned.
 *
 * The keeper passes SIGTERM, SIGINT, SIGHUP and SIGQUIT on to the server and
 * exits as the server did (the same code, or the same signal); the server
 * dies with the keeper (PR_SET_PDEATHSIG), so a kill -9 of the pid that was
 * started ends both, as it ended thawd before.
 */
#ifndef THAW_SERVER_EXITS_H
#define THAW_SERVER_EXITS_H

#include <stdbool.h>
#include <sys/types.h>

/* Split into keeper and server.  Returns in the server only: 0, or -errno
 * when no keeper could be made (the server then runs alone: logged; exit
 * statuses are unknown).  Call it before any thread exists. */
int exits_start_keeper(void);

/* The keeper's pid (the thawd that was started, which passes signals on),
 * or 0 when the server runs alone. */
pid_t exits_keeper_pid(void);

/* The wait status of the process pid whose start time (/proc stat field 22)
 * was start, if the keeper reaped it: true and *status.  Reads what the
 * keeper has sent so far; the last EXITS_KEPT exits are remembered. */
bool exits_lookup(pid_t pid, unsigned long long start, int *status);

#define EXITS_KEPT 1024

/* Take in what the keeper has sent (so that its pipe never fills): call it
 * now and then; exits_lookup does too. */
void exits_drain(void);

#endif
