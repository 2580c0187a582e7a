/* SPDX-License-Identifier: Apache-2.0 */
/* test_criu_cuts: a CRIU pages file's cut points are its pagemap entries'
 * boundaries (only entries whose pages are in the file count); a pagemap that does not add up is refused; store_put cuts
 * a pages file there, and cuts a file that only looks like one by content. */
#include "criu/criu_cuts.h"
#include "criu/criu_image.h"
#include "store/store.h"
#include "test/check.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[] = "/tmp/test_criu_cuts.XXXXXX";

static void write_file(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	REQUIRE(fd >= 0);
	REQUIRE(write(fd, data, len) == (ssize_t)len);
	close(fd);
}

#define E(va, np, fl) { .vaddr = (va), .has_nr_pages = true, .nr_pages = (np), .has_flags = true, .flags = (fl) }

int main(void)
{
	char img[PATH_MAX - 64], path[PATH_MAX], id[CHUNK_ID_LEN];
	/* 3 + 40 pages in the file; the entry in the parent and the lazy-less
	 * absent one (flags 0) are not. */
	struct criu_img_pagemap_entry e[] = {
		E(0x10000, 3, CRIU_PE_PRESENT),
		E(0x20000, 5, CRIU_PE_PARENT),
		E(0x7f0000003000, 40, CRIU_PE_PRESENT),
		E(0x7f1000000000, 2, 0),
	};
	struct criu_img_pagemap pm = { .pages_id = 7, .e = e, .n = 4 };
	uint8_t *pmbuf = NULL;
	size_t pmlen = 0;
	const size_t bytes = 43 * 4096;
	uint8_t *data = malloc(bytes);
	uint64_t *cuts = NULL;
	size_t n = 0;

	REQUIRE(data && mkdtemp(root));
	for (size_t i = 0; i < bytes; i++)
		data[i] = (uint8_t)(i * 2654435761u >> 13) | 1;
	snprintf(img, sizeof(img), "%s/img", root);
	REQUIRE(mkdir(img, 0755) == 0);
	REQUIRE(criu_img_encode_pagemap(&pm, &pmbuf, &pmlen) == 0);
	snprintf(path, sizeof(path), "%s/pagemap-42.img", img);
	write_file(path, pmbuf, pmlen);
	snprintf(path, sizeof(path), "%s/pages-7.img", img);
	write_file(path, data, bytes);

	/* Entry boundaries: the second in-file entry starts after 3 pages. */
	CHECK_EQ(criu_pages_cuts(img, "pages-7.img", bytes, &cuts, &n), 0);
	CHECK_EQ(n, 1);
	if (n == 1)
		CHECK_EQ(cuts[0], 3 * 4096);
	free(cuts);

	/* Not a pages file, no pagemap for it, a size that does not add up. */
	CHECK_EQ(criu_pages_cuts(img, "pagemap-42.img", bytes, &cuts, &n), -ENOENT);
	CHECK_EQ(criu_pages_cuts(img, "pages-8.img", bytes, &cuts, &n), -ENOENT);
	CHECK_EQ(criu_pages_cuts(img, "pages-7.img.x", bytes, &cuts, &n), -ENOENT);
	CHECK_EQ(criu_pages_cuts(img, "pages-7.img", bytes - 4096, &cuts, &n), -EINVAL);
	CHECK(cuts == NULL && n == 0);
	snprintf(path, sizeof(path), "%s/pagemap-43.img", img);
	write_file(path, pmbuf, pmlen / 2); /* truncated: refused, not trusted */
	CHECK(criu_pages_cuts(img, "pages-7.img", bytes, &cuts, &n) < 0 || n == 1);
	free(cuts);
	unlink(path);

	/* store_put: a chunk of pages-7.img starts at 3 pages. */
	snprintf(path, sizeof(path), "%s/store", root);
	struct store *s = store_open(path);
	REQUIRE(s);
	const char *paths[] = { img };
	REQUIRE(store_put(s, "cuts", paths, 1, NULL, false, id, NULL) == 0);
	struct manifest *m = NULL;
	REQUIRE(store_manifest_load(s, id, &m, id) == 0);
	bool found = false, pages_seen = false;
	for (size_t i = 0; i < m->nfiles; i++) {
		if (strcmp(m->files[i].path, "pages-7.img"))
			continue;
		pages_seen = true;
		for (size_t c = 0; c < m->files[i].nchunks; c++)
			found |= m->files[i].chunks[c].off == 3 * 4096;
	}
	CHECK(pages_seen && found);
	manifest_free(m);

	/* The same bytes under a name no pagemap claims: cut by content alone,
	 * so nothing starts at 3 pages (under CHUNKER_MIN). */
	snprintf(path, sizeof(path), "%s/plain", root);
	REQUIRE(mkdir(path, 0755) == 0);
	snprintf(path, sizeof(path), "%s/plain/pages-9.img", root);
	write_file(path, data, bytes);
	snprintf(path, sizeof(path), "%s/plain", root);
	const char *p2[] = { path };
	REQUIRE(store_put(s, "plain", p2, 1, NULL, false, id, NULL) == 0);
	REQUIRE(store_manifest_load(s, id, &m, id) == 0);
	REQUIRE(m->nfiles == 1);
	for (size_t c = 0; c < m->files[0].nchunks; c++)
		CHECK(m->files[0].chunks[c].off != 3 * 4096);
	manifest_free(m);
	store_close(s);

	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", root);
	free(pmbuf);
	free(data);
	return check_failures ? 1 : 0;
}
