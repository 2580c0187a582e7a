/* SPDX-License-Identifier: Apache-2.0 */
/* engine_files.c — the target side of both engines: create the image files. */
#define LOG_PREFIX "engine: "
#include "restore/engine.h"
#include "common/gpumem_protocol.h"
#include "common/log.h"
#include "common/util.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int create_one(const char *outdir, const struct manifest_file *f, int *fdp)
{
	char path[PATH_MAX];
	int fd = -1, ret = 0;

	if (snprintf(path, sizeof(path), "%s/%s", outdir, f->path) >= (int)sizeof(path)) {
		pr_err("path too long: %s/%s", outdir, f->path);
		return -ENAMETOOLONG;
	}
	/* The manifest parser allows sub-directories: make the parents. */
	char *slash = strrchr(path + strlen(outdir) + 1, '/');
	if (slash) {
		*slash = '\0';
		ret = mkdir_p(path, 0700);
		*slash = '/';
		if (ret)
			return ret;
	}
	/* O_NOFOLLOW: never write through a link planted in the output. */
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		ret = -errno;
		pr_perror("open %s", path);
		goto out;
	}
	/* Sized first, so that holes are never written and workers may write anywhere. */
	if (ftruncate(fd, (off_t)f->size) < 0) {
		ret = -errno;
		pr_perror("truncate %s to %llu bytes", path, (unsigned long long)f->size);
		goto out;
	}
	/* The owner's bits only: an image holds a process's memory, and only
	 * CRIU (root) reads it.  But libthaw-cuda's copy (prewarm/prewarm_gpu.c)
	 * is a public library the restored process maps from the image, and
	 * CRIU checks that file's mode against the dump's ("bad mode 0100600
	 * (expect 0100644)" failed every GPU restore): it keeps its read and
	 * execute bits. */
	mode_t mode = strcmp(f->path, GPUMEM_LIB_NAME) ? f->mode & 0700 : f->mode & 0755;

	if (fchmod(fd, mode) < 0) {
		ret = -errno;
		pr_perror("chmod %s", path);
		goto out;
	}
	*fdp = fd;
	fd = -1;
out:
	if (fd >= 0)
		close(fd);
	return ret;
}

int engine_create_files(const struct manifest *m, const char *outdir, int *fds)
{
	size_t i;
	int ret;

	for (i = 0; i < m->nfiles; i++)
		fds[i] = -1;
	ret = mkdir_p(outdir, 0700);
	if (ret)
		return ret;
	for (i = 0; i < m->nfiles; i++) {
		ret = create_one(outdir, &m->files[i], &fds[i]);
		if (ret)
			break;
	}
	if (ret) {
		for (i = 0; i < m->nfiles; i++) {
			if (fds[i] >= 0)
				close(fds[i]);
			fds[i] = -1;
		}
	}
	return ret;
}
