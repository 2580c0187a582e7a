/* SPDX-License-Identifier: Apache-2.0 */
/* errors.c — see errors.h. */
#include "server/errors.h"
#include "common/log.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

const char *api_why(int err)
{
	const char *m = log_last_error();

	return m && *m ? m : strerror(err < 0 ? -err : err);
}

bool errno_part_missing(int err)
{
	if (err < 0)
		err = -err;
	return err == ENOSYS || err == EOPNOTSUPP || err == ENODEV;
}

struct api_err api_err_from_errno(int err)
{
	if (err < 0)
		err = -err;
	/* A part of thaw or of the host (a GPU driver) is missing. */
	if (errno_part_missing(err))
		return (struct api_err){ 503, "unavailable" };
	switch (err) {
	case ETIMEDOUT:
		return (struct api_err){ 504, "timeout" };
	case ENOSPC:
	case EDQUOT:
		/* A disk, the RAM tier or a quota is full: the same word
		 * wherever it happens (dump, ingest, materialisation). */
		return (struct api_err){ 507, "no_space" };
	case EBADMSG:
		/* Stored data failed its check (a chunk, a pack index, a
		 * manifest): not the client's fault, and not a retry's cure. */
		return (struct api_err){ 500, "damaged" };
	case EAGAIN:
	case EBUSY:
	case ENOMEM:
	case EMFILE:
	case ENFILE:
		/* Out of something that frees up: the caller may retry. */
		return (struct api_err){ 503, "no_capacity" };
	case ENOEXEC:
		/* A spec, or a snapshot's, recorded by an older thaw that this
		 * one refuses (function/spec.h): nothing runs it until the
		 * function is PUT again (and snapshotted again). */
		return (struct api_err){ 409, "conflict" };
	case EACCES:
		/* Where the function would reach is not allowed (any more):
		 * its rootfs or directory, checked where used
		 * (function/confine.h), or a local image's file. */
		return (struct api_err){ 403, "forbidden" };
	default:
		/* ENOENT among them: what is missing decides what it means (a
		 * start judges it itself: starts.c, start_lost). */
		return (struct api_err){ 500, "internal" };
	}
}

/* Every code an error answer may have, with its status (docs/API.md,
 * "Errors"), the first of a status its default. */
static const struct api_err known[] = {
	{ 400, "bad_request" },	      { 400, "invalid_id" },
	{ 401, "unauthorized" },      { 403, "forbidden" },
	{ 404, "not_found" },	      { 405, "method_not_allowed" },
	{ 409, "conflict" },	      { 409, "no_snapshot" },
	{ 409, "no_remote" },	      { 413, "too_large" },
	{ 415, "unsupported_media_type" }, { 429, "too_many_instances" },
	{ 499, "client_gone" },	      { 500, "internal" },
	{ 500, "damaged" },	      { 500, "host_mismatch" },
	{ 502, "instance_failed" },   { 502, "remote_failed" },
	{ 502, "image_unavailable" }, { 409, "image_changed" },
	{ 503, "unavailable" },	      { 503, "no_capacity" },
	{ 503, "no_memory" },	      { 503, "no_gpu_memory" },
	{ 503, "no_gpu" },	      { 503, "queue_full" },
	{ 503, "queue_timeout" },     { 503, "shutting_down" },
	{ 504, "timeout" },	      { 507, "no_space" },
};

struct api_err api_err_known(unsigned status, const char *code)
{
	const struct api_err *dflt = NULL;

	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
		if (known[i].status != status)
			continue;
		if (code && !strcmp(code, known[i].code))
			return known[i];
		if (!dflt)
			dflt = &known[i];
	}
	return dflt ? *dflt : (struct api_err){ 500, "internal" };
}

/* The length of the UTF-8 sequence at s as JSON takes it (no overlong form,
 * no surrogate, nothing above U+10FFFF), or 0 if it is not one. */
static size_t utf8_len(const unsigned char *s)
{
	unsigned char lo = 0x80, hi = 0xbf;
	size_t n;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		n = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		n = 3;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		n = 4;
	else
		return 0;
	if (s[0] == 0xe0)
		lo = 0xa0;
	else if (s[0] == 0xed)
		hi = 0x9f;
	else if (s[0] == 0xf0)
		lo = 0x90;
	else if (s[0] == 0xf4)
		hi = 0x8f;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return n;
}

/* An error's message may echo what a client sent (an id, a Content-Type)
 * or what a tool printed: a byte that is not UTF-8 becomes '?', so that
 * the JSON answer can hold it and a refusal stays what it is, never the
 * answer of a failure to write it. */
static void utf8_clean(char *msg)
{
	unsigned char *s = (unsigned char *)msg;

	while (*s) {
		size_t n = utf8_len(s);

		if (n) {
			s += n;
		} else {
			*s = '?';
			s++;
		}
	}
}

json_t *api_error_json(const char *code, const char *msg)
{
	char clean[1024];

	snprintf(clean, sizeof(clean), "%s", msg);
	utf8_clean(clean);
	return json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", clean);
}
