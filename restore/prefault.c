/* SPDX-License-Identifier: Apache-2.0 */
/* prefault.c — see prefault.h. */
#define LOG_PREFIX "prefault: "
#include "restore/prefault.h"
#include "common/log.h"
#include "common/oci.h"
#include "restore/gpu_restore.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PREFAULT_BUF (2u << 20)

/* Read [start, end) of mem where the file behind it (fd, at offset off for
 * start) has data. */
static int read_data(int mem, int file, uint64_t start, uint64_t end, uint64_t off, char *buf,
		     uint64_t *bytes)
{
	uint64_t len = end - start, pos = off;

	while (pos < off + len) {
		off_t d = lseek(file, (off_t)pos, SEEK_DATA), h;

		if (d < 0 || (uint64_t)d >= off + len)
			break; /* ENXIO: no data after pos */
		h = lseek(file, d, SEEK_HOLE);
		if (h < 0 || (uint64_t)h > off + len)
			h = (off_t)(off + len);
		for (uint64_t p = (uint64_t)d; p < (uint64_t)h;) {
			size_t n = (uint64_t)h - p < PREFAULT_BUF ? (size_t)((uint64_t)h - p)
								  : PREFAULT_BUF;
			ssize_t r = pread(mem, buf, n, (off_t)(start + (p - off)));

			if (r <= 0)
				return r < 0 ? -errno : -EIO;
			p += (uint64_t)r;
			*bytes += (uint64_t)r;
		}
		pos = (uint64_t)h;
	}
	return 0;
}

static int prefault_one(pid_t pid, char *buf, uint64_t *bytes)
{
	char path[64], line[4096 + 256];
	int mem, ret = 0;
	FILE *maps;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	maps = fopen(path, "re");
	if (!maps)
		return -errno;
	snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
	mem = open(path, O_RDONLY | O_CLOEXEC);
	if (mem < 0) {
		ret = -errno;
		fclose(maps);
		return ret;
	}
	while (!ret && fgets(line, sizeof(line), maps)) {
		uint64_t start, end, off;
		char file[4096] = "", mf[96];
		int fd;

		if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %*s %" SCNx64 " %*s %*s %4095s", &start,
			   &end, &off, file) != 4 ||
		    strncmp(file, OCI_MAPPED_DEST "/", strlen(OCI_MAPPED_DEST) + 1))
			continue;
		snprintf(mf, sizeof(mf), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, (int)pid, start,
			 end);
		fd = open(mf, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		ret = read_data(mem, fd, start, end, off, buf, bytes);
		close(fd);
	}
	close(mem);
	fclose(maps);
	return ret;
}

int prefault_mapped(pid_t init, uint64_t *bytes)
{
	uint64_t total = 0;
	pid_t *pids = NULL;
	size_t n = 0;
	char *buf;
	int ret = pidns_members(init, &pids, &n);

	if (ret)
		return ret;
	buf = malloc(PREFAULT_BUF);
	if (!buf) {
		free(pids);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n && !ret; i++)
		ret = prefault_one(pids[i], buf, &total);
	if (ret)
		pr_warn("process %d: %s (the rest faults in when touched)", (int)init, strerror(-ret));
	if (bytes)
		*bytes = total;
	free(buf);
	free(pids);
	return ret;
}
