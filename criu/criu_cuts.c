/* SPDX-License-Identifier: Apache-2.0 */
/* criu_cuts.c — see criu_cuts.h. */
#define LOG_PREFIX "criu_cuts: "
#include "criu/criu_cuts.h"
#include "common/log.h"
#include "common/util.h"
#include "criu/criu_image.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int push(uint64_t **v, size_t *n, size_t *cap, uint64_t x)
{
	if (ARRAY_GROW(*v, *cap, *n + 1, 256))
		return -ENOMEM;
	(*v)[(*n)++] = x;
	return 0;
}

/* The cuts of one pagemap's entries, whose data fill file_size bytes. */
static int entry_cuts(const struct criu_img_pagemap *pm, const char *name, uint64_t file_size,
		      uint64_t **cuts, size_t *n)
{
	size_t cap = 0;
	uint64_t off = 0;

	for (size_t i = 0; i < pm->n; i++) {
		const struct criu_img_pagemap_entry *e = &pm->e[i];
		if (!criu_img_pme_in_pages_file(e))
			continue;
		uint64_t bytes = criu_img_pme_pages(e) * CRIU_PAGE_SIZE;
		if (off && push(cuts, n, &cap, off) < 0)
			return -ENOMEM;
		off += bytes;
	}
	if (off != file_size) {
		pr_err("%s describes %llu bytes of pages, the pages file has %llu", name,
		       (unsigned long long)off, (unsigned long long)file_size);
		return -EINVAL;
	}
	return 0;
}

int criu_pages_cuts(const char *dir, const char *pages_name, uint64_t file_size, uint64_t **cuts,
		    size_t *n)
{
	unsigned id;
	int used = 0, ret = -ENOENT;
	DIR *d = NULL;
	struct dirent *de;

	*cuts = NULL;
	*n = 0;
	if (sscanf(pages_name, "pages-%u.img%n", &id, &used) != 1 || pages_name[used])
		return -ENOENT;
	d = opendir(dir);
	if (!d)
		return -errno;
	while (ret == -ENOENT && (de = readdir(d))) {
		char path[PATH_MAX];
		uint8_t *buf = NULL;
		size_t len = 0;
		struct criu_img_pagemap pm = { 0 };

		if (strncmp(de->d_name, "pagemap-", 8))
			continue;
		if (snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= (int)sizeof(path))
			continue;
		ret = criu_img_read_file(path, CRIU_IMG_MAX_FILE, &buf, &len);
		if (ret == 0)
			ret = criu_img_decode_pagemap(buf, len, de->d_name, &pm);
		free(buf);
		if (ret < 0)
			break;
		ret = pm.pages_id == id ? entry_cuts(&pm, de->d_name, file_size, cuts, n)
					: -ENOENT;
		criu_img_pagemap_release(&pm);
	}
	closedir(d);
	if (ret < 0) {
		free(*cuts);
		*cuts = NULL;
		*n = 0;
	}
	return ret;
}
