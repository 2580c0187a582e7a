/* SPDX-License-Identifier: Apache-2.0 */
/* host_stage.c — see host_stage.h. */
#define LOG_PREFIX "host_stage: "
#include "common/host_stage.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

/* Two bundles written at once would stack two staging mounts. */
static pthread_mutex_t stage_lock = PTHREAD_MUTEX_INITIALIZER;

/* Scan the mount points: *under whether one lies below dir, *at whether
 * dir itself is one.  0 or -errno. */
static int scan(const char *dir, bool *under, bool *at)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	size_t dlen = strlen(dir), cap = 0;
	char *line = NULL;

	*under = *at = false;
	if (!f)
		return -errno;
	while (getline(&line, &cap, f) > 0) {
		/* id parent maj:min root mountpoint ... */
		char *save = NULL, *tok = strtok_r(line, " ", &save);

		for (int i = 1; tok && i < 5; i++)
			tok = strtok_r(NULL, " ", &save);
		if (!tok)
			continue;
		mountinfo_unescape(tok);
		if (!strcmp(tok, dir))
			*at = true;
		else if (!strncmp(tok, dir, dlen) && (tok[dlen] == '/' || dlen == 1))
			*under = true;
	}
	free(line);
	fclose(f);
	return 0;
}

/* Read-only, its other flags kept (a remount sets them all): an `rm -rf`
 * of the data directory must not reach the host's directory through it. */
static int make_readonly(const char *staged)
{
	static const struct { unsigned long st, ms; } keep[] = {
		{ ST_NOSUID, MS_NOSUID }, { ST_NODEV, MS_NODEV }, { ST_NOEXEC, MS_NOEXEC },
		{ ST_NOATIME, MS_NOATIME }, { ST_NODIRATIME, MS_NODIRATIME },
		{ ST_RELATIME, MS_RELATIME },
	};
	unsigned long flags = MS_REMOUNT | MS_BIND | MS_RDONLY;
	struct statvfs sv;

	if (statvfs(staged, &sv) < 0) {
		int ret = -errno;

		pr_perror("statvfs %s", staged);
		return ret;
	}
	for (size_t i = 0; i < ARRAY_SIZE(keep); i++)
		if (sv.f_flag & keep[i].st)
			flags |= keep[i].ms;
	if (mount(NULL, staged, NULL, flags, NULL) < 0) {
		int ret = -errno;

		pr_perror("remount %s read-only", staged);
		return ret;
	}
	return 0;
}

bool host_stage_has_submounts(const char *dir)
{
	bool under, at;

	return scan(dir, &under, &at) == 0 && under;
}

int host_stage_source(const char *root, const char *dir, char *out, size_t out_len)
{
	char staged[PATH_MAX];
	bool under, at;
	int ret;

	ret = scan(dir, &under, &at);
	if (ret) {
		pr_err("read /proc/self/mountinfo: %s", strerror(-ret));
		return ret;
	}
	if (!under) {
		snprintf(out, out_len, "%s", dir);
		return 0;
	}
	if ((size_t)snprintf(staged, sizeof(staged), "%s%s", root, dir) >= sizeof(staged) ||
	    strlen(staged) >= out_len)
		return -ENAMETOOLONG;
	pthread_mutex_lock(&stage_lock);
	/* Searchable by every uid (no listing): CRIU's restore binds the
	 * staged directory from inside the container's user namespace. */
	ret = mkdir_p(staged, 0711);
	if (!ret && chmod(root, 0711) < 0) {
		ret = -errno;
		pr_perror("chmod %s", root);
	}
	if (!ret)
		ret = scan(staged, &under, &at);
	if (ret || at)
		goto out;
	if (mount(dir, staged, NULL, MS_BIND, NULL) < 0) {
		ret = -errno;
		pr_perror("bind %s on %s", dir, staged);
		goto out;
	}
	if (mount(NULL, staged, NULL, MS_PRIVATE, NULL) < 0) {
		ret = -errno;
		pr_perror("make %s private", staged);
		umount2(staged, MNT_DETACH);
		goto out;
	}
	ret = make_readonly(staged);
	if (ret) {
		umount2(staged, MNT_DETACH);
		goto out;
	}
	pr_info("%s has submounts: bound alone on %s for user namespaces", dir, staged);
out:
	pthread_mutex_unlock(&stage_lock);
	if (!ret)
		snprintf(out, out_len, "%s", staged);
	return ret;
}
