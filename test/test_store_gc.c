/* SPDX-License-Identifier: Apache-2.0 */
/* test_store_gc.c — gc deletes only unreferenced chunks, keeps those of leased
 * manifests (even deleted ones), and forgets leases whose holder died. */
#include "common/log.h"
#include "common/util.h"
#include "store/store.h"
#include "test/check.h"
#include "test/store_damage.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char root[] = "/tmp/thaw-test-store-gc-XXXXXX";

static void make_file(const char *path, size_t size, uint64_t seed)
{
	uint8_t *b = malloc(size);
	REQUIRE(b);
	for (size_t i = 0; i < size; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		b[i] = (uint8_t)(seed >> 56);
	}
	REQUIRE(write_file_atomic(path, b, size, 0644) == 0);
	free(b);
}

static int count_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	REQUIRE(d);
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

static uint64_t nchunks(struct store *s)
{
	struct store_stats st;
	REQUIRE(store_stat(s, &st) == 0);
	return st.chunks;
}

/* Every non-hole chunk of manifest id is present. */
static int all_present(struct store *s, const struct manifest *m)
{
	for (size_t i = 0; i < m->nfiles; i++)
		for (size_t j = 0; j < m->files[i].nchunks; j++) {
			struct store_chunk_loc loc;
			if (m->files[i].chunks[j].zero)
				continue;
			if (store_chunk_locate(s, m->files[i].chunks[j].hash, &loc))
				return 0;
		}
	return 1;
}

/* Whether files a and b have the same bytes. */
static bool same_bytes(const char *a, const char *b)
{
	char *x = NULL, *y = NULL;
	size_t nx = 0, ny = 0;
	bool same = read_file(a, &x, &nx, 1 << 26) == 0 && read_file(b, &y, &ny, 1 << 26) == 0 &&
		    nx == ny && !memcmp(x, y, nx);

	free(x);
	free(y);
	return same;
}

/* A pack that is partly garbage is rewritten with what is live, unless a
 * lease holds one of its chunks; a store object opened before the rewrite
 * still finds the chunks; a pack left without its index by a dead put goes. */
static void test_repack(void)
{
	char dir[PATH_MAX], fa[PATH_MAX], fb[PATH_MAX], out[PATH_MAX], got[PATH_MAX + 8];
	char orphan[PATH_MAX + 40], packs[PATH_MAX + 8], idab[CHUNK_ID_LEN], ida[CHUNK_ID_LEN];
	struct manifest *mab = NULL, *ma = NULL;
	uint64_t freed = 0, bytes = 0;

	snprintf(dir, sizeof(dir), "%s/repack", root);
	snprintf(packs, sizeof(packs), "%s/packs", dir);
	snprintf(fa, sizeof(fa), "%s/ra.img", root);
	snprintf(fb, sizeof(fb), "%s/rb.img", root);
	make_file(fa, 2 << 20, 11);
	make_file(fb, 6 << 20, 12);
	struct store *s = store_open(dir);
	REQUIRE(s);
	const char *pab[] = {fa, fb}, *pa[] = {fa};
	REQUIRE(store_put(s, "ab", pab, 2, NULL, false, idab, NULL) == 0);
	REQUIRE(store_put(s, "a", pa, 1, NULL, false, ida, NULL) == 0);
	REQUIRE(store_manifest_load(s, idab, &mab, NULL) == 0);
	REQUIRE(store_manifest_load(s, ida, &ma, NULL) == 0);
	int npacks = count_dir(packs);
	CHECK(npacks >= 2);
	struct store *other = store_open(dir); /* as another process would see it */
	REQUIRE(other);

	/* ab deleted while a is leased: every pack holding a chunk of a stays as
	 * it is, each chunk where it was (a pack holding only b's goes). */
	const struct manifest_file *af = &ma->files[0];
	char (*where)[PATH_MAX] = calloc(af->nchunks, PATH_MAX);
	off_t *at = calloc(af->nchunks, sizeof(*at));
	REQUIRE(where && at);
	for (size_t i = 0; i < af->nchunks; i++) {
		size_t len;
		if (!af->chunks[i].zero)
			chunk_where(s, af->chunks[i].hash, where[i], &at[i], &len);
	}
	struct store_lease *l = store_lease_take(s, ida);
	REQUIRE(l);
	CHECK_EQ(store_manifest_delete(s, idab), 0);
	CHECK_EQ(store_gc(s, &freed, &bytes), 0);
	uint64_t freed_leased = freed, bytes_leased = bytes;
	CHECK(all_present(s, ma));
	for (size_t i = 0; i < af->nchunks; i++) {
		char path[PATH_MAX];
		off_t off;
		size_t len;
		if (af->chunks[i].zero)
			continue;
		chunk_where(s, af->chunks[i].hash, path, &off, &len);
		CHECK_STR(path, where[i]);
		CHECK_EQ(off, at[i]);
	}
	store_lease_release(l);
	free(where);
	free(at);

	/* Without the lease: the rest of b's chunks go, a's are rewritten into
	 * a new pack. */
	CHECK_EQ(store_gc(s, &freed, &bytes), 0);
	printf("repack: freed %llu + %llu chunks, %llu + %llu bytes\n",
	       (unsigned long long)freed_leased, (unsigned long long)freed,
	       (unsigned long long)bytes_leased, (unsigned long long)bytes);
	CHECK(freed_leased + freed > 0 && bytes_leased + bytes >= (4u << 20));
	CHECK(all_present(s, ma));
	CHECK(!all_present(s, mab));
	CHECK_EQ(count_dir(packs) % 2, 0); /* each pack with its index */
	CHECK_EQ(store_verify(s, NULL, NULL), 0);
	snprintf(out, sizeof(out), "%s/out", root);
	snprintf(got, sizeof(got), "%s/ra.img", out);
	rm_rf(out);
	CHECK_EQ(store_get(other, ida, out, false), 0);
	CHECK(same_bytes(fa, got));

	/* A pack with no index (a put killed before it indexed it) is garbage. */
	snprintf(orphan, sizeof(orphan), "%s/0123456789abcdef.pack", packs);
	REQUIRE(write_file_atomic(orphan, "half a pack", 11, 0444) == 0);
	CHECK_EQ(store_gc(s, &freed, &bytes), 0);
	CHECK(access(orphan, F_OK) != 0);
	CHECK(all_present(s, ma));

	rm_rf(out);
	manifest_free(mab);
	manifest_free(ma);
	store_close(other);
	store_close(s);
}

int main(void)
{
	char dir[PATH_MAX], fa[PATH_MAX], fb[PATH_MAX], ida[CHUNK_ID_LEN], idb[CHUNK_ID_LEN];
	char leases[PATH_MAX + 16];
	struct manifest *ma = NULL, *mb = NULL;
	uint64_t freed = 0, bytes = 0;

	REQUIRE(mkdtemp(root));
	snprintf(dir, sizeof(dir), "%s/store", root);
	snprintf(leases, sizeof(leases), "%s/leases", dir);
	struct store *s = store_open(dir);
	REQUIRE(s);
	snprintf(fa, sizeof(fa), "%s/a.img", root);
	snprintf(fb, sizeof(fb), "%s/b.img", root);
	make_file(fa, 2 << 20, 1);
	make_file(fb, 2 << 20, 2);
	const char *pa[] = {fa}, *pb[] = {fb};
	REQUIRE(store_put(s, "a", pa, 1, NULL, false, ida, NULL) == 0);
	REQUIRE(store_put(s, "b", pb, 1, NULL, false, idb, NULL) == 0);
	REQUIRE(store_manifest_load(s, ida, &ma, NULL) == 0);
	REQUIRE(store_manifest_load(s, idb, &mb, NULL) == 0);
	uint64_t total = nchunks(s);
	CHECK(total >= 8);

	/* Nothing unreferenced: gc frees nothing.  A leftover temp file goes. */
	char junk[PATH_MAX + 32];
	snprintf(junk, sizeof(junk), "%s/tmp/123.456.7", dir);
	REQUIRE(write_file_atomic(junk, "x", 1, 0644) == 0);
	CHECK_EQ(store_gc(s, &freed, &bytes), 0);
	CHECK_EQ(freed, 0);
	CHECK_EQ(nchunks(s), total);
	CHECK(access(junk, F_OK) != 0);

	/* Delete b: its chunks go, a's stay. */
	CHECK_EQ(store_manifest_delete(s, idb), 0);
	CHECK_EQ(store_gc(s, &freed, &bytes), 0);
	CHECK(freed > 0 && bytes >= freed * 16);
	CHECK(all_present(s, ma));
	CHECK(!all_present(s, mb));
	CHECK_EQ(nchunks(s), total - freed);
	CHECK_EQ(store_verify(s, NULL, NULL), 0);

	/* Lease a, delete it, gc: the chunks stay while the lease lives. */
	struct store_lease *l = store_lease_take(s, ida);
	REQUIRE(l);
	CHECK_EQ(count_dir(leases), 1);
	CHECK_EQ(store_manifest_delete(s, ida), 0);
	CHECK_EQ(store_gc(s, &freed, NULL), 0);
	CHECK_EQ(freed, 0);
	CHECK(all_present(s, ma));
	/* Release: the next gc frees them. */
	store_lease_release(l);
	CHECK_EQ(count_dir(leases), 0);
	CHECK_EQ(store_gc(s, &freed, NULL), 0);
	CHECK(freed > 0);
	CHECK_EQ(nchunks(s), 0);

	/* A lease in another process: live while it runs, stale once it died. */
	REQUIRE(store_put(s, "b", pb, 1, NULL, false, idb, NULL) == 0);
	int up[2], down[2]; /* child to parent, parent to child */
	REQUIRE(pipe(up) == 0 && pipe(down) == 0);
	pid_t pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		struct store *cs = store_open(dir);
		char c = store_lease_take(cs, idb) ? 'y' : 'n';
		(void)!write(up[1], &c, 1);
		(void)!read(down[0], &c, 1); /* wait to be told to die, then die holding it */
		_exit(0);
	}
	char c = 0;
	REQUIRE(read(up[0], &c, 1) == 1 && c == 'y');
	CHECK_EQ(store_manifest_delete(s, idb), 0);
	CHECK_EQ(store_gc(s, &freed, NULL), 0);
	CHECK_EQ(freed, 0);
	CHECK(all_present(s, mb));
	REQUIRE(write(down[1], "x", 1) == 1);
	waitpid(pid, NULL, 0);
	CHECK_EQ(count_dir(leases), 1); /* left behind by the dead holder */
	CHECK_EQ(store_gc(s, &freed, NULL), 0);
	CHECK(freed > 0);
	CHECK_EQ(count_dir(leases), 0);
	CHECK_EQ(nchunks(s), 0);

	/* A lease on a manifest that is not there fails and says so. */
	CHECK(store_lease_take(s, ida) == NULL);
	CHECK(strstr(log_last_error(), "no manifest") != NULL);
	store_lease_release(NULL);

	manifest_free(ma);
	manifest_free(mb);
	store_close(s);
	test_repack();
	rm_rf(root);
	return check_failures ? 1 : 0;
}
