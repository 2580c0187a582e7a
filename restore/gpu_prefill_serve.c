/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_prefill_serve.c — the fd-passing server of a fill
 * (gpu_prefill_internal.h): the filled allocations' export descriptors sent
 * to the library over a Unix socket in the instance's out directory, in
 * batches of GPUMEM_PREFILL_BATCH (common/gpumem_protocol.h), an empty
 * batch last.  The library maps them where the saved memory was.
 */
#define LOG_PREFIX "gpu: "
#include "common/gpumem_protocol.h"
#include "common/log.h"
#include "restore/gpu_prefill_internal.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* How long an offer waits for the library to connect after it is ready. */
#define SERVE_TIMEOUT_MS 60000

/* The out directory is the function's to write, so the socket is made and
 * given its mode in thawd's own directory above it, and only then renamed
 * into place (a rename replaces whatever the function put at that name,
 * and follows no link). */
int prefill_offer(struct gpu_prefill *pf, struct pf_proc *p)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char own[sizeof(sa.sun_path)];
	const char *slash = strrchr(pf->out_dir, '/');
	int n;

	if (snprintf(p->sock, sizeof(p->sock), "%s/" GPUMEM_PREFILL_FMT, pf->out_dir, p->ns_pid) >=
		    (int)sizeof(p->sock) || !slash ||
	    (n = snprintf(own, sizeof(own), "%.*s/.prefill-%d.sock", (int)(slash - pf->out_dir),
			  pf->out_dir, p->ns_pid)) < 0 || (size_t)n >= sizeof(own)) {
		p->sock[0] = '\0';
		snprintf(p->why, sizeof(p->why), "the socket's path is too long");
		return -ENAMETOOLONG; /* a socket's path is short: the library copies */
	}
	memcpy(sa.sun_path, own, sizeof(own));
	unlink(own);
	p->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (p->listen_fd < 0 || bind(p->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    chmod(own, 0666) || listen(p->listen_fd, 4) || rename(own, p->sock)) {
		snprintf(p->why, sizeof(p->why), "socket %.100s: %s", p->sock, strerror(errno));
		unlink(own);
		return -errno;
	}
	return 0;
}

/* Send p's allocations to the library that connected on c. */
static void serve_one(struct pf_proc *p, int c)
{
	struct gpumem_prefill_msg msg;
	size_t i = 0;

	do {
		char ctl[CMSG_SPACE(sizeof(int) * GPUMEM_PREFILL_BATCH)];
		struct iovec iov = { &msg, sizeof(msg) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
		int fds[GPUMEM_PREFILL_BATCH];

		memset(&msg, 0, sizeof(msg));
		memset(ctl, 0, sizeof(ctl));
		for (; i < p->n && msg.n < GPUMEM_PREFILL_BATCH; i++)
			if (p->a[i].fd >= 0) {
				msg.e[msg.n].file_off = p->a[i].off;
				msg.e[msg.n].size = p->a[i].size;
				fds[msg.n++] = p->a[i].fd;
			}
		if (msg.n) {
			struct cmsghdr *cm;

			mh.msg_control = ctl;
			mh.msg_controllen = CMSG_SPACE(sizeof(int) * msg.n);
			cm = CMSG_FIRSTHDR(&mh);
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			cm->cmsg_len = CMSG_LEN(sizeof(int) * msg.n);
			memcpy(CMSG_DATA(cm), fds, sizeof(int) * msg.n);
		}
		if (sendmsg(c, &mh, MSG_NOSIGNAL) != (ssize_t)sizeof(msg))
			break;
	} while (msg.n);
}

void prefill_serve(struct gpu_prefill *pf)
{
	struct pollfd *pfd = calloc(pf->np + 1, sizeof(*pfd));
	size_t left = 0;

	if (!pfd)
		return;
	for (;;) {
		left = 0;
		pfd[0] = (struct pollfd){ .fd = pf->wake[0], .events = POLLIN };
		for (size_t i = 0; i < pf->np; i++) {
			pfd[i + 1] = (struct pollfd){ .fd = -1 };
			if (!pf->p[i].served && pf->p[i].listen_fd >= 0) {
				pfd[i + 1].fd = pf->p[i].listen_fd;
				pfd[i + 1].events = POLLIN;
				left++;
			}
		}
		if (!left || poll(pfd, pf->np + 1, SERVE_TIMEOUT_MS) <= 0 || pfd[0].revents)
			break;
		for (size_t i = 0; i < pf->np; i++) {
			int c;

			if (!(pfd[i + 1].revents & POLLIN))
				continue;
			c = accept4(pf->p[i].listen_fd, NULL, NULL, SOCK_CLOEXEC);
			if (c < 0)
				continue;
			serve_one(&pf->p[i], c);
			close(c);
			pf->p[i].served = true;
			pr_debug("fill of process %d: taken by its library", pf->p[i].ns_pid);
		}
	}
	free(pfd);
}
