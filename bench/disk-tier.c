/* SPDX-License-Identifier: Apache-2.0 */
/* disk-tier.c — a start from the disk tier against the disk itself, in one run.
 *
 *	bench/disk-tier [--dir DIR] [--gb N] [--random PCT] [--text PCT] [--runs N]
 *	                [--threads N] [--tier auto|huge|plain] [--no-buffered] [--fresh] [--clean]
 *
 * Builds (or reuses) in DIR/store (default /var/tmp/thaw-disk-tier: a disk,
 * not tmpfs) a snapshot of N GB (default 4) of image files made of 4 MiB
 * pieces: --random percent (default 70) pseudo-random bytes, stored raw like
 * GPU weights, --text percent (default 20) text records that zstd compresses
 * ~4x like a runtime's heap, the rest zero pages (holes, never stored).  The
 * input is written in /dev/shm and removed after the put.  Then, every round
 * with the store's pages dropped first (drop_caches as root, else
 * posix_fadvise(DONTNEED) on every file of the store):
 *	- the floor: an O_DIRECT sequential read of every pack, 4 MiB at a time
 *	  (dd iflag=direct bs=4M), and the same with 16 reads of 1 MiB in flight;
 *	- thaw's materialisation: the manifest loaded by a fresh store object
 *	  (its binary form), then engine_materialize into a RAM tier directory
 *	  with the engine's defaults (auto reads: O_DIRECT on a cold store),
 *	  and the same with buffered reads (page cache, readahead);
 * and once, with the packs in the page cache, the CPU floor: the engine's
 * threads reading every chunk from the page cache, decoding and checking it,
 * writing nothing (what the cores allow, whatever the disk), and one thread
 * decoding the zstd chunks alone (the decompression rate per core).
 * GB/s are of stored bytes (what the disk reads) unless said; the ratio is
 * the floor's time over the engine's.  Also the manifest's load, JSON against
 * binary form.  The store stays for the next run (--fresh rebuilds it,
 * --clean removes it).  Needs root for drop_caches and a huge-page tier.
 */
#define LOG_PREFIX "bench: "
#include "common/log.h"
#include "common/util.h"
#include "restore/engine.h"
#include "restore/tier.h"
#include "store/internal.h"
#include "store/store.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[PATH_MAX - 128] = "/var/tmp/thaw-disk-tier";
static double gb = 4;
static unsigned pct_random = 70, pct_text = 20, runs = 2;
static bool fresh, clean, drop_ok = true, skip_buffered;

static uint64_t rng = 0x853c49e6748fea9bull;

static void fill_random(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i += 8) {
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		memcpy(p + i, &rng, MIN((size_t)8, n - i));
	}
}

static void fill_text(uint8_t *p, size_t n)
{
	static const char *w[] = {"alpha", "bravo", "charlie", "delta", "echo", "foxtrot"};
	size_t k = 0;

	for (unsigned r = 0; k < n; r++) {
		char line[96];
		int m = snprintf(line, sizeof(line), "rec %08u %s=%u %s\n", r, w[rng % 6],
				 (unsigned)(rng >> 20) % 1000, w[(rng >> 8) % 6]);

		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		memcpy(p + k, line, MIN((size_t)m, n - k));
		k += MIN((size_t)m, n - k);
	}
}

#define PIECE	   (4u << 20)
#define FILE_BYTES (512ull << 20)

/* The image: files of 512 MiB of 4 MiB pieces, the kinds interleaved
 * piece by piece in their shares (every 20 pieces hold them in proportion). */
static int make_image(const char *src, uint64_t bytes)
{
	uint8_t *buf = malloc(PIECE);
	uint64_t piece = 0;
	int ret = 0;

	if (!buf || mkdir_p(src, 0755))
		return -ENOMEM;
	for (int f = 0; bytes && !ret; f++) {
		char path[PATH_MAX];
		uint64_t n = MIN(bytes, FILE_BYTES);
		int fd;

		snprintf(path, sizeof(path), "%.3000s/pages-%d.img", src, f + 1);
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0) {
			ret = -errno;
			break;
		}
		for (uint64_t done = 0; done < n && !ret; done += PIECE, piece++) {
			size_t len = (size_t)MIN((uint64_t)PIECE, n - done);
			unsigned k = (unsigned)(piece * 7 % 100); /* spread over 0..99 */

			if (k < pct_random)
				fill_random(buf, len);
			else if (k < pct_random + pct_text)
				fill_text(buf, len);
			else
				memset(buf, 0, len);
			ret = write_all(fd, buf, len);
		}
		close(fd);
		bytes -= n;
	}
	free(buf);
	return ret;
}

/* The store's pages out of the page cache. */
static void drop_caches(const char *sdir)
{
	bool all = page_cache_drop(1, &sdir, 1);

	if (!all && drop_ok)
		printf("cannot write /proc/sys/vm/drop_caches: posix_fadvise(DONTNEED) on "
		       "every file of the store instead\n");
	drop_ok = drop_ok && all;
}

struct packs {
	size_t n;
	char (*path)[PATH_MAX];
	uint64_t *size;
	uint64_t bytes;
};

static int list_packs(const char *sdir, struct packs *p)
{
	char pdir[PATH_MAX];
	struct dirent *de;
	DIR *d;

	snprintf(pdir, sizeof(pdir), "%.3000s/packs", sdir);
	d = opendir(pdir);
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		size_t l = strlen(de->d_name);
		struct stat st;
		void *v;

		if (l < 6 || strcmp(de->d_name + l - 5, ".pack"))
			continue;
		v = realloc(p->path, (p->n + 1) * sizeof(*p->path));
		if (!v)
			break;
		p->path = v;
		v = realloc(p->size, (p->n + 1) * sizeof(*p->size));
		if (!v)
			break;
		p->size = v;
		snprintf(p->path[p->n], PATH_MAX, "%.3000s/%.255s", pdir, de->d_name);
		if (stat(p->path[p->n], &st))
			continue;
		p->size[p->n] = (uint64_t)st.st_size;
		p->bytes += (uint64_t)st.st_size;
		p->n++;
	}
	closedir(d);
	return 0;
}

/* dd iflag=direct bs=4M over every pack: one read at a time. */
static int floor_dd(const struct packs *p, uint64_t *bytes)
{
	uint8_t *buf = aligned_alloc(4096, PIECE);
	int ret = 0;

	if (!buf)
		return -ENOMEM;
	for (size_t i = 0; i < p->n && !ret; i++) {
		int fd = open(p->path[i], O_RDONLY | O_DIRECT | O_CLOEXEC);
		ssize_t n;

		if (fd < 0) {
			ret = -errno;
			break;
		}
		while ((n = read(fd, buf, PIECE)) > 0)
			*bytes += (uint64_t)n;
		if (n < 0)
			ret = -errno;
		close(fd);
	}
	free(buf);
	return ret;
}

#define QD_READS 16
#define QD_BYTES (1u << 20)

/* The same with QD_READS reads of 1 MiB in flight (io_uring). */
static int floor_qd(const struct packs *p, uint64_t *bytes)
{
	struct io_uring ring;
	uint8_t *buf = aligned_alloc(4096, (size_t)QD_READS * QD_BYTES);
	int ret = io_uring_queue_init(QD_READS, &ring, 0);

	if (ret || !buf) {
		free(buf);
		return ret ? ret : -ENOMEM;
	}
	for (size_t i = 0; i < p->n && !ret; i++) {
		int fd = open(p->path[i], O_RDONLY | O_DIRECT | O_CLOEXEC);
		uint64_t off = 0;
		unsigned inflight = 0, free_slot[QD_READS], nfree = QD_READS;

		if (fd < 0) {
			ret = -errno;
			break;
		}
		for (unsigned k = 0; k < QD_READS; k++)
			free_slot[k] = k;
		while ((off < p->size[i] || inflight) && !ret) {
			struct io_uring_cqe *cqe;

			while (off < p->size[i] && nfree) {
				struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
				unsigned s = free_slot[--nfree];

				io_uring_prep_read(sqe, fd, buf + (size_t)s * QD_BYTES, QD_BYTES, off);
				io_uring_sqe_set_data64(sqe, s);
				off += QD_BYTES;
				inflight++;
			}
			ret = io_uring_submit_and_wait(&ring, 1);
			if (ret < 0)
				break;
			ret = 0;
			while (io_uring_peek_cqe(&ring, &cqe) == 0) {
				if (cqe->res < 0)
					ret = cqe->res;
				else
					*bytes += (uint64_t)cqe->res;
				free_slot[nfree++] = (unsigned)io_uring_cqe_get_data64(cqe);
				inflight--;
				io_uring_cqe_seen(&ring, cqe);
			}
		}
		close(fd);
	}
	io_uring_queue_exit(&ring);
	free(buf);
	return ret;
}

/* Every distinct chunk of the manifest: where it lies, its length. */
struct loc {
	uint8_t hash[CHUNK_HASH_LEN];
	uint32_t pack, stored, len;
	uint64_t off;
	bool zstd;
};

struct cpu_job {
	struct store *s;
	const struct loc *locs;
	size_t n;
	int *fds; /* by store pack number */
	bool zstd_only;
	_Atomic size_t next;
	_Atomic uint64_t raw;
	atomic_int err;
};

static void *cpu_worker(void *arg)
{
	struct cpu_job *j = arg;
	struct chunk_codec *codec = chunk_codec_new();
	uint8_t *obj = malloc(chunk_encode_bound(CHUNK_MAX_RAW)), *raw = malloc(CHUNK_MAX_RAW);

	for (size_t i; codec && obj && raw && (i = atomic_fetch_add(&j->next, 1)) < j->n;) {
		const struct loc *l = &j->locs[i];

		if (j->zstd_only && !l->zstd)
			continue;
		if (pread(j->fds[l->pack], obj, l->stored, (off_t)l->off) != (ssize_t)l->stored ||
		    chunk_decode(codec, obj, l->stored, l->hash, raw, l->len)) {
			atomic_store(&j->err, -EIO);
			break;
		}
		atomic_fetch_add(&j->raw, l->len);
	}
	free(obj);
	free(raw);
	chunk_codec_free(codec);
	return NULL;
}

static double cpu_seconds(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* The chunks decoded and checked from the page cache by n threads, nothing
 * written: seconds, and *raw the bytes decoded. */
static double cpu_pass(struct cpu_job *j, unsigned n, bool zstd_only, uint64_t *raw)
{
	pthread_t t[256];
	unsigned made = 0;
	uint64_t t0 = now_ns();

	atomic_store(&j->next, 0);
	atomic_store(&j->raw, 0);
	j->zstd_only = zstd_only;
	for (unsigned i = 0; i < MIN(n, 256u); i++)
		if (pthread_create(&t[i], NULL, cpu_worker, j) == 0)
			made++;
	for (unsigned i = 0; i < made; i++)
		pthread_join(t[i], NULL);
	*raw = atomic_load(&j->raw);
	return (double)(now_ns() - t0) / 1e9;
}

static int locate_all(struct store *s, const struct manifest *m, struct loc **out, size_t *nout,
		      uint64_t *zstd_stored, uint64_t *zstd_raw)
{
	struct hash_set seen;
	struct loc *v = NULL;
	size_t n = 0, cap = 0;
	int ret = 0;

	hash_set_init(&seen);
	for (size_t i = 0; i < m->nfiles && !ret; i++)
		for (size_t k = 0; k < m->files[i].nchunks && !ret; k++) {
			const struct manifest_chunk *c = &m->files[i].chunks[k];
			struct store_chunk_loc l;

			if (c->zero || hash_set_add(&seen, c->hash) != 1)
				continue;
			if (store_chunk_locate(s, c->hash, &l) || l.pack == STORE_LOOSE) {
				ret = -ENOENT;
				break;
			}
			if (n == cap) {
				void *p = realloc(v, (cap = cap ? 2 * cap : 4096) * sizeof(*v));
				if (!p) {
					ret = -ENOMEM;
					break;
				}
				v = p;
			}
			memcpy(v[n].hash, c->hash, CHUNK_HASH_LEN);
			v[n].pack = l.pack;
			v[n].stored = l.stored;
			v[n].off = l.off;
			v[n].len = (uint32_t)c->len;
			v[n].zstd = l.stored != c->len && l.stored != CHUNK_HEADER_SIZE + c->len;
			if (v[n].zstd) {
				*zstd_stored += l.stored;
				*zstd_raw += c->len;
			}
			n++;
		}
	hash_set_release(&seen);
	*out = v;
	*nout = n;
	return ret;
}

static char tierdir[PATH_MAX - 64];
static bool tier_mounted;

static void tier_cleanup(void)
{
	if (tier_mounted)
		tier_root_unmount(tierdir);
	rm_rf(tierdir);
}

enum { R_DD, R_QD, R_ENGINE, R_BUFFERED, NROWS };
static const char *const row_names[NROWS] = {
	"floor: O_DIRECT sequential read of the packs, 4 MiB reads (dd iflag=direct bs=4M)",
	"O_DIRECT read of the packs, 16 x 1 MiB in flight (io_uring)",
	"thaw: manifest load + engine_materialize, default reads",
	"thaw: the same, buffered reads (page cache, readahead)",
};

int main(int argc, char **argv)
{
	char sdir[PATH_MAX], idpath[PATH_MAX], src[PATH_MAX], out[PATH_MAX];
	char id[CHUNK_ID_LEN] = "", *idbuf = NULL, a[32], b[32], c[32];
	const char *tier_mode = "auto";
	struct engine_opts o;
	struct manifest_totals tot;
	struct packs packs = {0};
	struct store *s = NULL;
	struct manifest *m = NULL;
	double best[NROWS], secs[NROWS][16];
	char how[NROWS][160];
	size_t len;

	engine_opts_default(&o);
	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(argv[i], "--dir") && v)
			snprintf(dir, sizeof(dir), "%s", argv[++i]);
		else if (!strcmp(argv[i], "--gb") && v)
			gb = atof(argv[++i]);
		else if (!strcmp(argv[i], "--random") && v)
			pct_random = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--text") && v)
			pct_text = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--runs") && v)
			runs = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--threads") && v)
			o.threads = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--tier") && v)
			tier_mode = argv[++i];
		else if (!strcmp(argv[i], "--fresh"))
			fresh = true;
		else if (!strcmp(argv[i], "--clean"))
			clean = true;
		else if (!strcmp(argv[i], "--no-buffered"))
			skip_buffered = true;
		else {
			fprintf(stderr, "usage: %s [--dir DIR] [--gb N] [--random PCT] [--text PCT] "
					"[--runs N] [--threads N] [--tier auto|huge|plain] [--no-buffered] "
					"[--fresh] [--clean]\n",
				argv[0]);
			return 2;
		}
	}
	if (gb <= 0 || pct_random + pct_text > 100 || !runs || runs > 16 || !o.threads) {
		fprintf(stderr, "bad settings\n");
		return 2;
	}
	snprintf(sdir, sizeof(sdir), "%s/store", dir);
	snprintf(idpath, sizeof(idpath), "%s/id", dir);
	if (fresh)
		rm_rf(dir);
	if (read_file(idpath, &idbuf, &len, 200) == 0 && len >= CHUNK_ID_LEN - 1) {
		snprintf(id, sizeof(id), "%.*s", CHUNK_ID_LEN - 1, idbuf);
		printf("reusing the snapshot in %s (--fresh to rebuild)\n", dir);
	} else {
		struct store_put_stats ps;
		const char *paths[1] = {src};
		uint64_t t0;

		rm_rf(dir);
		snprintf(src, sizeof(src), "/dev/shm/thaw-disk-tier-src-%d", getpid());
		printf("making an image of %.1f GB in %s (%u%% random, %u%% text, %u%% zero)...\n",
		       gb, src, pct_random, pct_text, 100 - pct_random - pct_text);
		fflush(stdout);
		if (make_image(src, (uint64_t)(gb * 1e9)) || !(s = store_open(sdir))) {
			fprintf(stderr, "cannot build the image under %s\n", src);
			rm_rf(src);
			return 1;
		}
		t0 = now_ns();
		if (store_put(s, "disk-tier", paths, 1, NULL, false, id, &ps)) {
			rm_rf(src);
			return 1;
		}
		rm_rf(src);
		printf("store put: %s in %.1f s\n", fmt_bytes(ps.logical_bytes, a), ms_since(t0) / 1e3);
		write_file_atomic(idpath, id, strlen(id), 0644);
		store_close(s);
	}
	free(idbuf);
	if (list_packs(sdir, &packs) || !packs.n) {
		fprintf(stderr, "no packs in %s\n", sdir);
		return 1;
	}

	/* The manifest: JSON against binary form, from a cold page cache. */
	uint8_t hash[CHUNK_HASH_LEN];
	double json_ms, bin_ms;
	{
		char mpath[PATH_MAX];
		uint64_t t0;

		s = store_open(sdir);
		if (!s || chunk_id_parse(id, hash))
			return 1;
		store_manifest_path(s, hash, mpath, sizeof(mpath));
		drop_caches(sdir);
		t0 = now_ns();
		if (store_manifest_read(mpath, hash, &m))
			return 1;
		json_ms = ms_since(t0);
		manifest_free(m);
		m = NULL;
		store_close(s);
		drop_caches(sdir);
		s = store_open(sdir);
		t0 = now_ns();
		if (!s || store_manifest_load(s, id, &m, NULL))
			return 1;
		bin_ms = ms_since(t0);
		if (store_manifest_json_reads(s))
			printf("(the store had no binary form of the manifest: it has one now)\n");
	}
	manifest_totals(m, &tot);

	/* What the chunks are: raw or zstd, and their bytes. */
	struct loc *locs = NULL;
	size_t nlocs = 0;
	uint64_t zstd_stored = 0, zstd_raw = 0, unique_raw = 0;
	if (locate_all(s, m, &locs, &nlocs, &zstd_stored, &zstd_raw)) {
		fprintf(stderr, "a chunk of the snapshot is not in a pack\n");
		return 1;
	}
	for (size_t i = 0; i < nlocs; i++)
		unique_raw += locs[i].len;
	printf("snapshot %s: %s of image in %zu files (%s in holes), %llu chunks (%zu distinct), "
	       "%s in %zu packs\n",
	       id, fmt_bytes(tot.logical_bytes, a), m->nfiles, fmt_bytes(tot.zero_bytes, b),
	       (unsigned long long)tot.chunks, nlocs, fmt_bytes(packs.bytes, c), packs.n);
	printf("stored: %.1f%% of the distinct chunks' bytes in zstd chunks (%s of zstd objects "
	       "holding %s), the rest raw\n",
	       unique_raw ? 100.0 * (double)zstd_raw / (double)unique_raw : 0.0,
	       fmt_bytes(zstd_stored, a), fmt_bytes(zstd_raw, b));

	/* The tier as thawd's default root gets it: a huge-page tmpfs, except
	 * on a VM with free page reporting (tier_root.c). */
	enum tier_root_kind kind = TIER_ROOT_PLAIN;
	bool huge = !strcmp(tier_mode, "huge") ||
		    (!strcmp(tier_mode, "auto") && !tier_root_page_reporting());
	snprintf(tierdir, sizeof(tierdir), "/dev/shm/thaw-disk-tier-%d", getpid());
	rm_rf(tierdir);
	if (tier_root_prepare(tierdir, 2 * tot.logical_bytes, huge ? CONFIG_HUGE_ON : CONFIG_HUGE_OFF,
			      &kind))
		printf("no huge-page tmpfs here (%s): a plain /dev/shm directory\n", log_last_error());
	tier_mounted = kind == TIER_ROOT_MOUNTED;
	atexit(tier_cleanup);
	snprintf(out, sizeof(out), "%s/out", tierdir);
	printf("machine: %ld CPUs; engine: %u threads, queue depth %u; tier: %s\n\n",
	       sysconf(_SC_NPROCESSORS_ONLN), o.threads, o.queue_depth,
	       tier_mounted ? "huge-page tmpfs (huge=within_size)" : "plain tmpfs directory");
	store_close(s);
	s = NULL;
	manifest_free(m);
	m = NULL;

	for (int i = 0; i < NROWS; i++) {
		best[i] = 1e30;
		how[i][0] = '\0';
	}
	for (unsigned r = 0; r < runs; r++) {
		for (int row = 0; row < NROWS; row++) {
			char h[160] = "";
			struct engine_stats st;
			uint64_t bytes = 0, t0;
			double load_ms = 0;
			int ret;

			if (row == R_BUFFERED && skip_buffered) {
				secs[row][r] = best[row] = 0;
				continue;
			}
			rm_rf(out);
			drop_caches(sdir);
			t0 = now_ns();
			if (row == R_DD) {
				ret = floor_dd(&packs, &bytes);
			} else if (row == R_QD) {
				ret = floor_qd(&packs, &bytes);
			} else {
				struct engine_opts oo = o;

				oo.direct = row == R_BUFFERED ? ENGINE_DIRECT_OFF : ENGINE_DIRECT_AUTO;
				s = store_open(sdir);
				ret = s ? store_manifest_load(s, id, &m, NULL) : -EIO;
				load_ms = ms_since(t0);
				if (ret == 0)
					ret = engine_materialize(s, m, out, &oo, &st);
				if (ret == 0)
					snprintf(h, sizeof(h),
						 "manifest %.1f ms, setup %.0f ms, %s, %s, %s, %u threads, %u "
						 "in flight",
						 load_ms, st.setup_seconds * 1e3,
						 st.direct ? "O_DIRECT" : "buffered",
						 st.mapped ? "mmap" : "pwrite",
						 st.shares ? "shares" : "one stream", st.threads,
						 st.queue_depth);
				manifest_free(m);
				m = NULL;
				store_close(s);
				s = NULL;
			}
			secs[row][r] = (double)(now_ns() - t0) / 1e9;
			if (ret) {
				fprintf(stderr, "%s failed: %s\n", row_names[row], log_last_error());
				return 1;
			}
			if (secs[row][r] < best[row]) {
				best[row] = secs[row][r];
				snprintf(how[row], sizeof(how[row]), "%s", h);
			}
			printf("  round %u: %-60.60s %6.3f s  %s\n", r + 1, row_names[row],
			       secs[row][r], h);
			fflush(stdout);
		}
	}
	rm_rf(out);

	/* The CPU floor, from the page cache. */
	struct cpu_job job = {.locs = locs, .n = nlocs};
	uint64_t raw_all = 0, raw_zstd = 0;
	double cpu_all = 0, cpu_zstd = 0, c0;
	{
		uint8_t *buf = malloc(PIECE);
		int maxpack = 0;

		for (size_t i = 0; i < nlocs; i++)
			maxpack = MAX(maxpack, (int)locs[i].pack + 1);
		job.fds = calloc((size_t)maxpack, sizeof(int));
		s = store_open(sdir);
		if (!buf || !job.fds || !s) {
			free(buf);
			free(job.fds);
			store_close(s);
			return 1;
		}
		store_packs_refresh(s);
		for (int i = 0; i < maxpack; i++) {
			char p[PATH_MAX];
			job.fds[i] = store_pack_path(s, (uint32_t)i, p, sizeof(p)) == 0
					     ? open(p, O_RDONLY | O_CLOEXEC)
					     : -1;
			while (job.fds[i] >= 0 && read(job.fds[i], buf, PIECE) > 0)
				;
		}
		free(buf);
		c0 = cpu_seconds();
		cpu_all = cpu_pass(&job, o.threads, false, &raw_all);
		c0 = cpu_seconds() - c0;
		(void)c0;
		cpu_zstd = cpu_pass(&job, 1, true, &raw_zstd);
		if (atomic_load(&job.err)) {
			fprintf(stderr, "a chunk failed its check in the CPU pass\n");
			return 1;
		}
		for (int i = 0; i < maxpack; i++)
			if (job.fds[i] >= 0)
				close(job.fds[i]);
		free(job.fds);
		store_close(s);
	}
	double zstd_rate = cpu_zstd > 0 ? (double)raw_zstd / cpu_zstd : 0;
	double dfloor = zstd_rate > 0 ? (double)raw_zstd / zstd_rate / o.threads : 0;

	printf("\nbest of %u rounds, store's pages dropped before each; GB = 1e9 bytes; stored = "
	       "%s in packs, image = %s (%s not in holes)\n\n",
	       runs, fmt_bytes(packs.bytes, a), fmt_bytes(tot.logical_bytes, b),
	       fmt_bytes(tot.logical_bytes - tot.zero_bytes, c));
	printf("| what | best s | rounds s | GB/s stored | GB/s image | floor s / this |\n");
	printf("|---|---:|---|---:|---:|---:|\n");
	for (int row = 0; row < NROWS; row++) {
		char rs[160] = "";
		size_t k = 0;

		if (!best[row])
			continue;
		for (unsigned r = 0; r < runs; r++)
			k += (size_t)snprintf(rs + k, sizeof(rs) - k, "%s%.3f", r ? ", " : "",
					      secs[row][r]);
		printf("| %s%s%s%s | %.3f | %s | %.2f | %.2f | **%.2f** |\n", row_names[row],
		       how[row][0] ? " [" : "", how[row], how[row][0] ? "]" : "", best[row], rs,
		       (double)packs.bytes / best[row] / 1e9,
		       row >= R_ENGINE ? (double)tot.logical_bytes / best[row] / 1e9 : 0.0,
		       best[R_DD] / best[row]);
	}
	printf("| CPU floor: %u threads decode and check every chunk from the page cache, no "
	       "writes | %.3f | | %.2f | %.2f | %.2f |\n",
	       o.threads, cpu_all, (double)packs.bytes / cpu_all / 1e9,
	       (double)raw_all / cpu_all / 1e9, best[R_DD] / cpu_all);
	printf("\nmanifest load, store's pages dropped: JSON (read, SHA-256, parse) %.1f ms; "
	       "binary form %.1f ms\n",
	       json_ms, bin_ms);
	printf("zstd: one thread decodes (and checks) %s of zstd chunks into %s at %.2f GB/s of "
	       "output; decompression floor with %u threads: %.3f s\n",
	       fmt_bytes(zstd_stored, a), fmt_bytes(raw_zstd, b), zstd_rate / 1e9, o.threads,
	       dfloor);
	printf("cold cache by %s\n",
	       drop_ok ? "echo 1 > /proc/sys/vm/drop_caches"
		       : "posix_fadvise(DONTNEED) on every file of the store");
	free(locs);
	free(packs.path);
	free(packs.size);
	if (clean)
		rm_rf(dir);
	else
		printf("(snapshot kept in %s for the next run; --clean removes it)\n", dir);
	return 0;
}
