/* SPDX-License-Identifier: Apache-2.0 */
/* thawd.c — thawd's life (server.h): it reads the tokens and the TLS
 * certificate, locks the data directory, builds the components in order
 * (metrics, instances, jobs, registry, store, recovery of an earlier run,
 * the remote, restore or boot, the RAM tier, standbys, routed pools,
 * lifetimes), starts the HTTP transport (http.h) and, at shutdown, stops
 * them in reverse.  It is the one file that knows every component; none of
 * them calls back into it.
 *
 *	thawd_main.c → thawd.c → http.c → route_table.c → api*.c, logs.c
 *	                       ↘ the components (registry, jobs, snapshots, insts,
 *	                         standby, remote_sync, fallback, pool, lifetimes,
 *	                         recover), which the handlers call too
 */
#define LOG_PREFIX "thawd: "
#include "common/log.h"
#include "common/util.h"
#include "restore/gpu_prefill.h"
#include "restore/tier.h"
#include "server/api.h"
#include "server/fallback.h"
#include "server/http.h"
#include "server/insts.h"
#include "server/internal.h"
#include "server/jobs.h"
#include "server/lifetimes.h"
#include "server/metrics.h"
#include "server/pool.h"
#include "server/proxy.h"
#include "server/registry.h"
#include "server/remote_sync.h"
#include "server/snapshots.h"
#include "server/standby.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* File descriptors thawd holds whatever it serves: its logs, the data
 * directory's lock, the store's and the tier's files, the listening socket,
 * libmicrohttpd's and the keeper's pipes, the routed instances' namespaces. */
#define FDS_BASE 64
/* Those a start holds at once (pipes to runc and CRIU, the image's and the
 * tier's files, the namespace, the record being written). */
#define FDS_PER_START 16
/* A routed request's connection to its instance (proxy.c's link): the
 * socket, and the pair libcurl's multi handle wakes itself with. */
#define FDS_PER_LINK 3

void server_opts_default(struct server_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->listen = SERVER_DEFAULT_LISTEN;
	o->max_body = SERVER_DEFAULT_MAX_BODY;
	o->max_starts = SERVER_DEFAULT_MAX_STARTS;
	o->max_standby = SERVER_DEFAULT_MAX_STANDBY;
	o->max_snapshots = SERVER_DEFAULT_MAX_SNAPSHOTS;
	o->max_conns = SERVER_DEFAULT_MAX_CONNS;
	o->max_conns_per_ip = SERVER_DEFAULT_MAX_CONNS_PER_IP;
	o->request_timeout = SERVER_DEFAULT_REQUEST_TIMEOUT;
	o->keep_ended_s = SERVER_DEFAULT_KEEP_ENDED_S;
	o->tier_scrub_rate = TIER_SCRUB_RATE_DEFAULT;
	o->drain_timeout = SERVER_DEFAULT_DRAIN_TIMEOUT;
	o->remote_poll_s = SERVER_DEFAULT_REMOTE_POLL_S;
}

/* What the file descriptor limit allows, so that running out of them
 * never fails a start half-way nor passes for an instance's failure: from
 * what FDS_BASE leaves, a quarter for starts (--max-starts lowered to fit),
 * then half of the rest for client connections (--max-connections lowered
 * to fit: libmicrohttpd takes no more), the other half for connections to
 * instances (links_max: a routed request beyond answers 503). */
static void fd_budget(struct server *s)
{
	unsigned long long lim = 1024, avail, rest, starts, conns, links;
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		lim = rl.rlim_cur == RLIM_INFINITY ? 1ull << 20 : (unsigned long long)rl.rlim_cur;
	avail = lim > 2 * FDS_BASE ? lim - FDS_BASE : lim / 2;
	starts = MIN((unsigned long long)s->opts.max_starts, MAX(1ull, avail / 4 / FDS_PER_START));
	rest = avail - starts * FDS_PER_START;
	conns = MIN((unsigned long long)s->opts.max_conns, MAX(1ull, rest / 2));
	links = MAX(1ull, (rest - MIN(rest, conns)) / FDS_PER_LINK);
	s->fd_limit = (unsigned)MIN(lim, (unsigned long long)UINT_MAX);
	s->links_max = (unsigned)MIN(links, (unsigned long long)UINT_MAX);
	if (starts < s->opts.max_starts || conns < s->opts.max_conns)
		pr_warn("%llu file descriptors (the limit): at most %llu connections (not %u), "
			"%llu starts at once (not %u); raise the limit (ulimit -n, LimitNOFILE=) "
			"for more",
			lim, conns, s->opts.max_conns, starts, s->opts.max_starts);
	s->opts.max_starts = (unsigned)starts;
	s->opts.max_conns = (unsigned)conns;
	pr_info("%llu file descriptors: at most %u connections, %u connections to instances, "
		"%u starts at once",
		lim, s->opts.max_conns, s->links_max, s->opts.max_starts);
}

unsigned server_max_starts(const struct server *s)
{
	return s->opts.max_starts;
}

int server_start(struct server *s)
{
	int ret = http_start(s);

	if (ret)
		return ret;
	if (s->port_file[0]) {
		/* The port alone on the first line, as readers have always
		 * found it; "https" on a second line says how to talk to it. */
		char buf[16];
		int n = snprintf(buf, sizeof(buf), "%u\n%s", s->port, s->tls.cert ? "https\n" : "");

		ret = write_file_atomic(s->port_file, buf, (size_t)n, 0644);
		if (ret)
			return ret;
	}
	return 0;
}

uint16_t server_port(const struct server *s)
{
	return s->port;
}

struct server *server_new(const struct thaw_config *c, const struct server_opts *o)
{
	struct server *s = calloc(1, sizeof(*s));
	char dir[PATH_MAX + 16];

	if (!s) {
		pr_err("out of memory");
		return NULL;
	}
	s->cfg = *c;
	s->opts = *o;
	s->lock_fd = -1;
	pthread_mutex_init(&s->stat_lock, NULL);
	cond_init_monotonic(&s->stat_cv);
	http_init(s);
	snprintf(s->listen, sizeof(s->listen), "%s", o->listen ? o->listen : SERVER_DEFAULT_LISTEN);
	s->opts.listen = s->listen;
	if (o->port_file)
		snprintf(s->port_file, sizeof(s->port_file), "%s", o->port_file);
	s->opts.port_file = NULL;
	s->opts.token_file = s->opts.control_token_file = s->opts.data_token_file = NULL;
	s->opts.tls_cert_file = s->opts.tls_key_file = NULL;
	fd_budget(s);
	if ((o->token_file && auth_load_kind(&s->auth, AUTH_FULL, o->token_file)) ||
	    (o->control_token_file &&
	     auth_load_kind(&s->auth, AUTH_CONTROL, o->control_token_file)) ||
	    (o->data_token_file && auth_load_kind(&s->auth, AUTH_DATA, o->data_token_file)))
		goto err;
	/* Before anything is touched: without a token, thawd answers anyone
	 * who can reach it, so it listens only where nobody else can. */
	if (!s->auth.enabled) {
		char host[128], port[8];

		if (listen_addr_parse(s->listen, host, sizeof(host), port, sizeof(port)) == 0 &&
		    !host_is_loopback(host)) {
			pr_err("--listen %s is not a loopback address (127.0.0.0/8, ::1, localhost): a "
			       "token is required there (--token-file / THAW_TOKEN_FILE, or "
			       "--control-token-file / THAW_CONTROL_TOKEN_FILE and "
			       "--data-token-file / THAW_DATA_TOKEN_FILE)",
			       s->listen);
			goto err;
		}
	}
	/* Before anything is touched too: a certificate or a key that cannot
	 * be served stops thawd here, not once it has recovered and listens.
	 * TLS does not stand in for a token off loopback (checked above). */
	if (!o->tls_cert_file != !o->tls_key_file) {
		pr_err("%s without %s: TLS needs both", o->tls_cert_file ? "--tls-cert" : "--tls-key",
		       o->tls_cert_file ? "--tls-key" : "--tls-cert");
		goto err;
	}
	if (o->tls_cert_file && tls_load(&s->tls, o->tls_cert_file, o->tls_key_file))
		goto err;
	if (http_listen_precheck(s->listen))
		goto err;

	if (dir_make_private(c->data_dir))
		goto err;
	/* Before anything reads or changes what the data directory holds. */
	if (recover_lock_data_dir(s))
		goto err;
	s->metrics = metrics_new();
	s->insts = insts_new();
	s->jobs = jobs_new(o->max_snapshots);
	if (!s->metrics || !s->insts || !s->jobs) {
		pr_err("out of memory");
		goto err;
	}
	snprintf(dir, sizeof(dir), "%s/jobs", c->data_dir);
	if (jobs_set_log_dir(s->jobs, dir))
		goto err;
	snprintf(dir, sizeof(dir), "%s/functions", c->data_dir);
	s->reg = registry_open(dir);
	if (!s->reg)
		goto err;
	/* Every function's paths are compared with the others' (function/confine.h). */
	s->cfg.registered = registry_specs;
	s->cfg.registered_arg = s->reg;
	s->store = store_open(c->store_dir);
	if (!s->store) {
		pr_err("cannot open the store %s: %s", c->store_dir, log_last_error());
		goto err;
	}
	if (recover_startup(s))
		goto err;
	recover_preload_manifests(s);
	if (snapshots_collector_start(s))
		pr_warn("no store gc in the background: only at start-up");
	if (remote_sync_start(s))
		goto err;
	s->fallback = fallback_new(c);
	if (!s->fallback)
		goto err;
	if (tier_root_prepare(c->ram_tier_dir, c->ram_tier_bytes, c->tier_huge, NULL) == 0)
		s->tier = tier_open(c->ram_tier_dir, c->ram_tier_bytes, s->store, NULL);
	if (s->tier) {
		tier_set_mapped(s->tier, c->mapped_min);
		s->scrub = tier_scrub_start(s->tier, o->tier_scrub_rate);
	}
	if (!s->tier)
		pr_err("cannot open the RAM tier %s: starts will answer 503 until thawd is "
		       "restarted with a working --ram-tier",
		       c->ram_tier_dir);
	else if (o->max_standby)
		s->standby = standby_new(s);
	s->pool = pool_new(s, proxy_link_free);
	if (!s->pool)
		pr_warn("out of memory: routed requests (/function/...) will answer 503");
	recover_route_adopted(s);
	if (lifetimes_start(s))
		pr_warn("no idle or lifetime stops, no reaping of exited instances");
	if (api_metrics_start(s))
		pr_warn("/metrics will show no store or GPU figures");
	return s;
err:
	server_free(s);
	return NULL;
}

void server_set_drain_hook(struct server *s, void (*hook)(void))
{
	s->drain_hook = hook;
}

void server_drain_begin(struct server *s)
{
	atomic_store(&s->draining, true);
}

void server_drain(struct server *s)
{
	uint64_t until = now_ns() + (uint64_t)s->opts.drain_timeout * 1000000000ull;
	unsigned routed, starts;

	atomic_store(&s->draining, true);
	routed = atomic_load(&s->routed_open);
	starts = atomic_load(&s->starts_running);
	if (routed || starts)
		pr_info("draining: waiting for %u routed request(s) and %u start(s) (%u s at most)",
			routed, starts, s->opts.drain_timeout);
	/* Still listening: the balancer's health checks see "draining", and
	 * a request that reaches this host meanwhile is told to go elsewhere. */
	while (((routed = atomic_load(&s->routed_open)) ||
		(starts = atomic_load(&s->starts_running))) &&
	       now_ns() < until)
		usleep(20 * 1000);
	if (routed || starts)
		pr_warn("drain: %u routed request(s), %u start(s) still in flight after %u s: "
			"stopping anyway",
			routed, starts, s->opts.drain_timeout);
	else
		pr_info("drained");
}

void server_shutdown(struct server *s)
{
	if (!s)
		return;
	atomic_store(&s->stopping, true);
	/* Connections already open are served (new work on them answers 503). */
	http_quiesce(s);
	if (s->jobs)
		jobs_drain(s->jobs);
	/* Before the HTTP threads stop: a POST …/push?wait=1 waits on it. */
	remote_sync_quiesce(s);
	/* Routed requests waiting are refused; those being served may end. */
	pool_shutdown(s->pool, POOL_DRAIN_MS);
	proxy_drain(s, POOL_DRAIN_MS);
	if (atomic_load(&s->starts_running))
		pr_info("waiting for %u start(s) to finish", atomic_load(&s->starts_running));
	while (atomic_load(&s->starts_running))
		usleep(20 * 1000);
	http_stop(s);
	lifetimes_finish(s);
	standby_free(s->standby);
	s->standby = NULL;
	stop_own_instances(s);
}

void server_free(struct server *s)
{
	if (!s)
		return;
	if (s->preload_started) {
		atomic_store(&s->stopping, true);
		pthread_join(s->preload, NULL);
	}
	http_stop(s);
	lifetimes_finish(s);
	api_metrics_finish(s); /* before the store it reads */
	standby_free(s->standby);
	pool_free(s->pool);
	jobs_free(s->jobs);
	fallback_free(s->fallback);
	remote_sync_finish(s);
	snapshots_collector_stop(s); /* before the store it collects */
	tier_scrub_stop(s->scrub); /* before the tier it checks */
	/* No start runs now: the tier files a fill pinned are let go, and the
	 * pin cache's reaper ends, before the tier closes. */
	gpu_prefill_finish();
	tier_close(s->tier);
	store_close(s->store);
	registry_free(s->reg);
	insts_free(s->insts);
	metrics_free(s->metrics);
	tls_release(&s->tls);
	pthread_mutex_destroy(&s->stat_lock);
	pthread_cond_destroy(&s->stat_cv);
	http_release(s);
	/* Last: the next thawd on this data directory may start now. */
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	free(s);
}
