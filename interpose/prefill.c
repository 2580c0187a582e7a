/* SPDX-License-Identifier: Apache-2.0 */
/* prefill.c — device memory thawd fills for a restore (docs/DESIGN.md, "GPU
 * memory", "Filled while CRIU restores").
 *
 * A save writes, beside the saved bytes, their layout: where each mapping
 * lies in the file and the properties of its memory.  With it thawd makes
 * the same allocations on the instance's GPU and copies the RAM tier's file
 * into them while CRIU and the driver restore the process, which is what
 * the copy back did after them.  At RESTORE the library takes them over:
 * each arrives as a POSIX file descriptor (cuMemExportToShareableHandle in
 * thawd) and is imported and mapped at its saved address, so that the
 * start waits for a map, not a copy.  Whatever does not arrive, or fails to
 * map, stays saved and is copied as before: correct, only slower.
 */
#include "interpose/gm.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

/* The UUID of the process's device ordinal dev, as NVML writes it
 * ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"), into out; "" where the
 * driver does not say.  CUDA's ordinals are the process's own
 * (CUDA_VISIBLE_DEVICES' order, and CUDA_DEVICE_ORDER's), not the host's:
 * the UUID is what tells thawd which GPU an allocation was on. */
static void device_uuid(int dev, char out[48])
{
	cu_device d = 0;
	cu_uuid u;
	cu_fn_cuDeviceGetUuid *get = gm_real.cuDeviceGetUuid_v2 ? gm_real.cuDeviceGetUuid_v2 :
								   gm_real.cuDeviceGetUuid;
	const unsigned char *b = u.bytes;

	out[0] = '\0';
	if (!get || !gm_real.cuDeviceGet || gm_real.cuDeviceGet(&d, dev) != CU_SUCCESS ||
	    get(&u, d) != CU_SUCCESS)
		return;
	snprintf(out, 48,
		 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
		 b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
		 b[14], b[15]);
}

int gm_layout_write(const char *dir)
{
	char path[4096], tmp[4200], uuids[CUDA_MAX_DEVICES][48];
	bool asked[CUDA_MAX_DEVICES] = { false };
	FILE *f;
	int bad;

	snprintf(path, sizeof(path), "%s/" GPUMEM_LAYOUT_FMT, dir, (int)getpid());
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "we");
	if (!f)
		return -1;
	fprintf(f, "%s\n", GPUMEM_LAYOUT_MAGIC);
	for (struct gm_map *m = gm_maps; m; m = m->next) {
		const char *uuid = "";

		if (!m->saved || m->h->imported) /* an import has no bytes here */
			continue;
		if (m->device >= 0 && m->device < CUDA_MAX_DEVICES) {
			if (!asked[m->device])
				device_uuid(m->device, uuids[m->device]);
			asked[m->device] = true;
			uuid = uuids[m->device];
		}
		fprintf(f, "%llu %llu %d %u %u %u%s%s\n", (unsigned long long)m->file_off,
			(unsigned long long)m->size, m->device,
			m->h->prop.allocFlags.compressionType,
			m->h->prop.allocFlags.gpuDirectRDMACapable, m->h->prop.allocFlags.usage,
			uuid[0] ? " " : "", uuid);
	}
	bad = ferror(f);
	if (fclose(f) || bad || rename(tmp, path)) {
		unlink(tmp);
		return -1;
	}
	return 0;
}

/* Map the memory fd names at the saved mapping that lies at file_off. */
static void take_one(unsigned long long file_off, unsigned long long size, int fd,
		     struct gpumem_record *r)
{
	cu_handle rh = 0;
	struct gm_map *m;

	for (m = gm_maps; m; m = m->next)
		if (m->saved && !m->h->imported && m->file_off == file_off && m->size == size)
			break;
	if (!m)
		return;
	gm_trace("prefill: importing %llu bytes at file offset %llu", size, file_off);
	if (gm_real.cuMemImportFromShareableHandle(&rh, (void *)(uintptr_t)fd,
				  CU_HANDLE_POSIX_FD) != CU_SUCCESS)
		return;
	gm_trace("prefill: mapping it at %#llx", (unsigned long long)m->va);
	/* Its access set with the others' after (gm_access_pending). */
	if (gm_map_handle(m, rh, false) != CU_SUCCESS) {
		gm_real.cuMemRelease(rh);
		return;
	}
	/* Memory this process shares goes on to its importers as the very
	 * descriptor thawd sent (gm_share_restore): the driver does not
	 * export again what a process imported (on two H200s the rank's
	 * export of its filled buffer failed, and the start with it). */
	if (m->h->exported && m->h->carried) {
		int keep = fcntl(fd, F_DUPFD_CLOEXEC, 0);

		if (keep >= 0) {
			gm_share_fds_close(m->h);
			m->h->fds[m->h->nfds++] = keep;
			m->h->fill_fd = true;
		}
	}
	r->allocs++;
	r->bytes += size;
	if (m->device >= 0 && m->device < CUDA_MAX_DEVICES)
		r->dev_bytes[m->device] += size;
	r->prefilled_allocs++;
	r->prefilled_bytes += size;
}

/* One message: its entries and their descriptors.  The number of entries,
 * or -1 at the end (or a broken stream). */
static int take_message(int sock, struct gpumem_record *r)
{
	struct gpumem_prefill_msg msg;
	char ctl[CMSG_SPACE(sizeof(int) * GPUMEM_PREFILL_BATCH)];
	struct iovec iov = { &msg, sizeof(msg) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
			     .msg_controllen = sizeof(ctl) };
	int fds[GPUMEM_PREFILL_BATCH], nfds = 0;
	ssize_t got;

	memset(&msg, 0, sizeof(msg));
	got = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_WAITALL);
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));

			for (int i = 0; i < k && nfds < GPUMEM_PREFILL_BATCH; i++)
				memcpy(&fds[nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
		}
	if (got == (ssize_t)sizeof(msg) && !(mh.msg_flags & MSG_CTRUNC) && msg.n == (unsigned)nfds &&
	    msg.n <= GPUMEM_PREFILL_BATCH)
		for (unsigned i = 0; i < msg.n; i++)
			take_one(msg.e[i].file_off, msg.e[i].size, fds[i], r);
	else
		msg.n = 0, got = -1;
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	return got < 0 || msg.n == 0 ? -1 : (int)msg.n;
}

void gm_prefill_take(const char *dir, struct gpumem_record *r)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = 10 };
	double t0 = gm_now_ms();
	int sock, n;

	if (!dir)
		return;
	n = snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/" GPUMEM_PREFILL_FMT, dir,
		     (int)getpid());
	if (n < 0 || (size_t)n >= sizeof(sa.sun_path) || access(sa.sun_path, F_OK))
		return; /* thawd filled nothing: the copy does it all */
	sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (sock < 0)
		return;
	/* thawd answers at once or not at all: never hang the restore. */
	setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	gm_trace("prefill: connecting to %s", sa.sun_path);
	if (connect(sock, (struct sockaddr *)&sa, sizeof(sa)) == 0)
		while (take_message(sock, r) > 0)
			;
	close(sock);
	gm_access_pending(r);
	gm_trace("prefill: %llu allocation(s) taken", (unsigned long long)r->prefilled_allocs);
	r->prefill_ms = gm_now_ms() - t0;
}
