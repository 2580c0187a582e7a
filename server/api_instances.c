/* SPDX-License-Identifier: Apache-2.0 */
/* api_instances.c — the data plane's instance routes (server/api.h): GET
 * /instances[/<iid>], DELETE /instances/<iid>; and the stops that a
 * function's delete makes.
 */
#define LOG_PREFIX "thawd: "
#include "common/log.h"
#include "common/util.h"
#include "restore/instance.h"
#include "restore/instance_ended.h"
#include "server/api.h"
#include "server/errors.h"
#include "server/insts.h"
#include "server/internal.h"
#include "server/lifetimes.h"
#include "server/metrics.h"
#include "server/standby.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *api_record_id(json_t *rec)
{
	const char *id = json_string_value(json_object_get(rec, "instance"));

	return id ? id : json_string_value(json_object_get(rec, "id"));
}

/* Whether rec is an instance that a start of this thawd is still making:
 * that start stops it itself if its function is gone when it is done. */
static bool own_start(json_t *rec)
{
	const char *state = json_string_value(json_object_get(rec, "state"));
	json_t *pid = json_object_get(rec, "starter_pid");

	return state && !strcmp(state, "starting") && json_is_integer(pid) &&
	       json_integer_value(pid) == getpid();
}

/* Add id to the list of stops under way (a name is dropped if out of
 * memory: that one is then not waited for). */
static void note_under_way(char (**ids)[64], size_t *n, size_t *cap, const char *id)
{
	if (*n == *cap) {
		size_t ncap = *cap ? 2 * *cap : 8;
		char (*grown)[64] = realloc(*ids, ncap * sizeof(**ids));

		if (!grown)
			return;
		*ids = grown;
		*cap = ncap;
	}
	snprintf((*ids)[(*n)++], 64, "%s", id);
}

/* How long a delete of a function waits for the stops of its instances
 * that were under way already (a DELETE of one of them, an idle stop):
 * their grace, and the teardown after it. */
#define STOPS_UNDER_WAY_WAIT_MS 60000

/* Wait until none of the n instances in ids has a record left: the record
 * goes last, once its container, namespace and directory are gone. */
static void wait_stops_under_way(struct server *s, char (*ids)[64], size_t n)
{
	uint64_t t0 = now_ns();

	for (size_t i = 0; i < n; i++) {
		while (instance_recorded(&s->cfg, ids[i]) && ms_since(t0) < STOPS_UNDER_WAY_WAIT_MS)
			usleep(20 * 1000);
		if (instance_recorded(&s->cfg, ids[i]))
			pr_warn("instance %s: its stop, under way before its function was "
				"deleted, has not ended after %d s",
				ids[i], STOPS_UNDER_WAY_WAIT_MS / 1000);
	}
}

int api_stop_function_instances(struct server *s, const char *function, size_t *stopped,
				   char failed[128])
{
	char (*under_way)[64] = NULL;
	size_t nunder = 0, cap = 0;
	struct inst_ref *refs = NULL;
	json_t *list = NULL, *rec;
	size_t n = 0, i;
	int ret, err = 0;

	*stopped = 0;
	failed[0] = '\0';
	standby_retire_function(s->standby, function);
	if (insts_take(s->insts, function, &refs, &n) == 0) {
		for (i = 0; i < n; i++) {
			ret = lifetimes_stop_now(s, refs[i].id, "function_deleted",
						 "its function was deleted");
			if (ret == -EALREADY)
				note_under_way(&under_way, &nunder, &cap, refs[i].id);
			if (ret == 0)
				(*stopped)++;
			else if (ret != -EALREADY && ret != -ENOENT)
				pr_warn("stop instance %s of %s: %s", refs[i].id, function,
					api_why(ret));
		}
	}
	free(refs);
	/* The records on disk are the word on what is left: those above that
	 * failed are still there, and are tried once more. */
	log_clear_error();
	ret = instance_list(&s->cfg, &list);
	if (ret || !json_is_array(list)) {
		err = ret ? ret : -EIO;
		snprintf(failed, 128, "its instances could not be listed");
		pr_warn("function %s: cannot list its instances: %s", function, api_why(err));
		goto out;
	}
	json_array_foreach(list, i, rec)
	{
		const char *fn = json_string_value(json_object_get(rec, "function"));
		const char *id = api_record_id(rec);

		if (!fn || !id || strcmp(fn, function) || !id_valid(id) || own_start(rec))
			continue;
		ret = lifetimes_stop_now(s, id, "function_deleted",
					 "its function was deleted");
		if (ret == -EALREADY)
			note_under_way(&under_way, &nunder, &cap, id);
		if (ret == 0) {
			(*stopped)++;
		} else if (ret != -EALREADY && ret != -ENOENT) {
			pr_warn("stop instance %s of %s: %s", id, function, api_why(ret));
			if (!err) {
				err = ret;
				snprintf(failed, 128, "instance %s could not be stopped", id);
			}
		}
	}
out:
	json_decref(list);
	/* Stops another caller had begun are not this one's, but the
	 * function's instances are: the delete answers once they are gone. */
	wait_stops_under_way(s, under_way, nunder);
	free(under_way);
	return err;
}


/* What a record may not show: a standby's snapshot_meta holds its
 * function's spec, the values of its "env" among it (an API key), and the
 * instance routes are the data plane's, which may not read a spec
 * (docs/API.md, "Authentication").  Taking a standby reads it from disk. */
static void record_for_client(json_t *rec)
{
	json_object_del(rec, "snapshot_meta");
}

static int get_instances(struct req *q, const char *one)
{
	json_t *list = NULL, *rec, *found = NULL;
	size_t i;
	int ret;

	ret = instance_list(&q->srv->cfg, &list);
	if (ret) {
		struct api_err e = api_err_from_errno(ret);

		return reply_error(q, e.status, e.code, "cannot list instances: %s", api_why(ret));
	}
	if (!one) {
		/* ?all=1: with the instances that ended and are still kept, as
		 * `docker ps -a` lists exited containers. */
		const char *all = req_query(q, "all");

		if (all && strcmp(all, "0") && strcmp(all, "false"))
			instance_ended_list(&q->srv->cfg, list);
		json_array_foreach(list, i, rec) {
			record_for_client(rec);
		}
		return reply_json(q, 200, json_pack("{s:o}", "instances", list));
	}
	json_array_foreach(list, i, rec)
	{
		const char *id = api_record_id(rec);

		if (id && !strcmp(id, one)) {
			found = json_incref(rec);
			break;
		}
	}
	json_decref(list);
	if (!found && id_valid(one))
		instance_ended_get(&q->srv->cfg, one, &found);
	if (!found)
		return reply_error(q, 404, "not_found", "no instance %s", one);
	record_for_client(found);
	return reply_json(q, 200, found);
}

/* The record of instance id (a new reference) with its state, as GET
 * /instances shows it: 0, -ENOENT, or instance_list's error. */
static int find_record(struct server *s, const char *id, json_t **out)
{
	json_t *list = NULL, *rec;
	size_t i;
	int ret;

	*out = NULL;
	ret = instance_list(&s->cfg, &list);
	if (ret)
		return ret;
	json_array_foreach(list, i, rec)
	{
		const char *rid = api_record_id(rec);

		if (rid && !strcmp(rid, id)) {
			*out = json_incref(rec);
			break;
		}
	}
	json_decref(list);
	return *out ? 0 : -ENOENT;
}

/* 404 for a DELETE of instance id, saying how it ended if it has. */
static int no_instance(struct req *q, const char *id)
{
	json_t *ended = NULL;
	int ret;

	if (instance_ended_get(&q->srv->cfg, id, &ended))
		return reply_error(q, 404, "not_found", "no instance %s", id);
	ret = reply_error(q, 404, "not_found", "no instance %s: it has ended (%s)", id,
			  json_string_value(json_object_get(ended, "reason")) ?: "?");
	json_decref(ended);
	return ret;
}

int api_delete_instance(struct req *q)
{
	const char *id = q->route.id;
	const char *state, *wait;
	json_t *rec = NULL;
	double recorded_grace, grace_s;
	struct instance_end end = { 0 };
	char msg[160];
	bool starting;
	int ret;

	/* A start in progress owns what it has made so far: tearing that
	 * down under it would only make it fail.  Once it has answered, the
	 * instance is there to stop. */
	log_clear_error();
	ret = find_record(q->srv, id, &rec);
	state = json_string_value(json_object_get(rec, "state"));
	starting = state && !strcmp(state, "starting");
	/* Its function's stop_grace_s, recorded at its start (0 in records of
	 * instances thawd did not start: killed at once, as before). */
	recorded_grace = json_number_value(json_object_get(rec, "stop_grace_s"));
	json_decref(rec);
	if (ret == -ENOENT)
		return no_instance(q, id);
	if (ret) {
		struct api_err e = api_err_from_errno(ret);

		return reply_error(q, e.status, e.code, "cannot list instances: %s", api_why(ret));
	}
	if (starting)
		return reply_error(q, 409, "conflict",
				   "instance %s is starting; stop it once its start has answered",
				   id);
	grace_s = recorded_grace;
	if (req_query_seconds(q, "grace_s", &grace_s, msg, sizeof(msg)))
		return reply_error(q, 400, "bad_request", "%s", msg);
	wait = req_query(q, "wait");
	snprintf(end.why, sizeof(end.why), "DELETE");
	/* The answer once the instance cannot be reached; its grace, the kill
	 * and the teardown go on behind it (?wait=1: answered once it is all
	 * gone). */
	if (wait && strcmp(wait, "0") && strcmp(wait, "false")) {
		ret = lifetimes_stop_instance(q->srv, id, (int)(grace_s * 1000), &end);
		if (ret == 0)
			metrics_instance_stopped(q->srv->metrics, "delete");
	} else {
		ret = lifetimes_stop_background(q->srv, id, (int)(grace_s * 1000), &end, "delete");
	}
	if (ret == -EALREADY)
		return reply_error(q, 409, "conflict",
				   "instance %s is being stopped by another request", id);
	if (ret == -ENOENT)
		return no_instance(q, id);
	if (ret) {
		struct api_err e = api_err_from_errno(ret);

		return reply_error(q, e.status, e.code, "cannot stop instance %s: %s", id,
				   api_why(ret));
	}
	return reply_empty(q, 204);
}

int api_get_instances(struct req *q)
{
	return get_instances(q, NULL);
}

int api_get_instance(struct req *q)
{
	return get_instances(q, q->route.id);
}
