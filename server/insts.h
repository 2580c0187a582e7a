/* SPDX-License-Identifier: Apache-2.0 */
/* insts.h — the instances this thawd started, by function.
 *
 * The records on disk (restore/instance.h: instance_list) are what GET
 * /instances shows; this table is what thawd itself needs: which instances a
 * function has (DELETE /functions/<id> stops them), how many run (metrics),
 * which to stop when thawd stops; and which are being stopped now.
 * Thread-safe.
 */
#ifndef THAW_SERVER_INSTS_H
#define THAW_SERVER_INSTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct insts;

struct inst_ref {
	char id[64];
	char function[64];
};

/* When thawd stops an instance by itself (server/lifetimes.h); 0: never. */
struct inst_limits {
	double idle_s;     /* no bytes through its endpoint and no connection that long; a
			    * routed instance: that long after its last routed request */
	double lifetime_s; /* that long after its start */
	double grace_s;    /* SIGTERM, then SIGKILL after that long */
	uint64_t started_ms; /* CLOCK_REALTIME ms of its start (its answer) */
};

struct inst_view {
	struct inst_ref ref;
	pid_t pid;
	unsigned long long pid_start; /* its start time (/proc stat field 22); 0: unknown */
	bool adopted;                 /* started by an earlier thawd */
	struct inst_limits limits;
};

struct insts *insts_new(void);
void insts_free(struct insts *t); /* NULL is fine */

/* Instance id of function, whose first process is pid (started at
 * pid_start, 0 if unknown); adopted: an earlier thawd started it. */
int insts_add(struct insts *t, const char *id, const char *function, pid_t pid,
	      unsigned long long pid_start, bool adopted);
/* Remove id; -ENOENT if it is not there. */
int insts_remove(struct insts *t, const char *id);
/* Remove and return (in *out, you own it) the instances of function, or all
 * of them when function is NULL. */
int insts_take(struct insts *t, const char *function, struct inst_ref **out, size_t *n);
/* How many there are, and how many of them have a live first process. */
size_t insts_count(struct insts *t, size_t *alive);
/* The function of instance id into function (64 bytes); -ENOENT. */
int insts_function(struct insts *t, const char *id, char function[64]);

/* Stops: one at a time per instance, whoever asks (DELETE /instances/<iid>,
 * DELETE /functions/<id>, a start that stops its own instance), so that two
 * never tear down one instance together.  Claim id before stopping it: 0, or
 * -EALREADY while another holds it.  Release it once stopped (or not). */
int insts_claim(struct insts *t, const char *id);
void insts_release(struct insts *t, const char *id);

/* A start of function may go on if it has fewer than max instances (0: no
 * limit), counting its starts in flight but not its instances being stopped
 * (claimed: no request reaches them from their stop's first step; what they
 * still hold on a GPU or in memory is for those checks to weigh, and a
 * burst does not wait out their grace): it is then counted (until
 * insts_unreserve) and 0; else -EUSERS.  *have: how many it had.  A stop
 * that fails releases its claim, and the instance counts again. */
int insts_reserve(struct insts *t, const char *function, unsigned max, unsigned *have);
void insts_unreserve(struct insts *t, const char *function);
/* The limits of instance id; -ENOENT. */
int insts_set_limits(struct insts *t, const char *id, const struct inst_limits *l);
/* A copy of the table (you own *out). */
int insts_list(struct insts *t, struct inst_view **out, size_t *n);

#endif
