/* SPDX-License-Identifier: Apache-2.0 */
/* userns_holds.h — a function's user-namespace range given back to the pool
 * only once nothing of the function runs in it.
 *
 * A DELETE of a function stops its instances and gives its range back
 * (function/userns.h), and the next function to ask gets the lowest free
 * range: that one.  A snapshot job of the deleted function (a POST
 * /functions/<id>/snapshot, or the re-snapshot after a start that had to
 * boot) goes on with its own container in that range until it ends, so two
 * functions would run as the same host uids.  So a snapshot job holds its
 * function's range while it runs, and a DELETE that finds it held leaves
 * the range taken: the last job to end gives it back (and unmounts its
 * image's idmapped rootfs) if the function is still gone.
 */
#ifndef THAW_SERVER_USERNS_HOLDS_H
#define THAW_SERVER_USERNS_HOLDS_H

#include <stdbool.h>

struct server;

/* A snapshot job of fn begins (before anything of it runs). */
void userns_hold(const char *fn);

/* That job has ended: where fn was deleted while it ran and this was its
 * last job, fn's range is given back now, unless fn exists again. */
void userns_unhold(struct server *s, const char *fn);

/* fn is deleted (its instances stopped): its range given back now, or, while
 * a job of fn holds it, when the last one ends.  true where it was given
 * back now (or fn had none), false where it waits or failed (logged). */
bool userns_release_unheld(struct server *s, const char *fn);

#endif
