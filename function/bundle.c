/* SPDX-License-Identifier: Apache-2.0 */
/* bundle.c — see bundle.h. */
#define LOG_PREFIX "bundle: "
#include "function/bundle.h"
#include "common/log.h"
#include "common/gpumem_protocol.h"
#include "common/oci.h"
#include "function/confine.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* What a container in a user namespace needs of the host, opened to its
 * range: the way to its root (runc's init walks it as the range's uid 0)
 * and to the staged binds (at a restore CRIU opens them from inside the
 * namespace), a host-rooted skeleton (runc makes the mount points in it),
 * and libthaw-cuda's answers directory, which the library writes. */
static int reach(const struct function_bundle *b, const char *dir,
		 const struct function_host_paths *hp)
{
	char root[PATH_MAX + 16];
	int ret;

	if (hp->rootfs[0])
		snprintf(root, sizeof(root), "%s", hp->rootfs);
	else
		snprintf(root, sizeof(root), "%s/rootfs", dir);
	ret = userns_reach(b->allow, root, dir, b->userns);
	/* CRIU binds the staged directories from inside the namespace. */
	if (!ret && hp->stage[0])
		ret = userns_reach(b->allow, hp->stage, dir, b->userns);
	if (!ret && !hp->rootfs[0])
		ret = userns_give(root, b->userns);
	if (!ret && b->gpumem_out && chown(b->gpumem_out, b->userns->base, b->userns->base) < 0) {
		ret = -errno;
		pr_perror("chown %s to host uid %u", b->gpumem_out, b->userns->base);
	}
	return ret;
}

/* An image's rootfs in a user namespace: the root runc gets is b's
 * image_root, the cache's rootfs (hp->rootfs, checked) idmapped to the
 * range (images/idmap.c), in which its files are the range's; it must be
 * that very directory.  The cache's path goes to cache_root (len bytes):
 * the idmapped mount is read-only, so the mount points runc would make
 * are made there first (oci_spec's mountpoints_in).  0 or -errno. */
static int use_image_root(const struct function_bundle *b, struct function_host_paths *hp,
			  char *cache_root, size_t len)
{
	struct stat a, c;

	if (!b->image_root) {
		pr_err("an image in a user namespace needs its rootfs idmapped to the range");
		return -EINVAL;
	}
	if (stat(b->image_root, &a) < 0 || stat(hp->rootfs, &c) < 0 || a.st_dev != c.st_dev ||
	    a.st_ino != c.st_ino) {
		pr_err("%s is not the image's rootfs %s", b->image_root, hp->rootfs);
		return -EINVAL;
	}
	snprintf(cache_root, len, "%s", hp->rootfs);
	snprintf(hp->rootfs, sizeof(hp->rootfs), "%s", b->image_root);
	return 0;
}

int function_bundle_write(const struct function_bundle *b, const char *dir,
			  struct function_host_paths *hp)
{
	static char *const no_argv[] = { "/bin/true", NULL };
	const struct func_spec *spec = b->spec;
	char cgroup[192], port_env[32], preload[PATH_MAX + 64], stage[PATH_MAX + 8], **env = NULL;
	char cache_root[PATH_MAX];
	struct oci_bind *binds = NULL;
	struct oci_spec o = { 0 };
	char (*src)[PATH_MAX + 32] = NULL; /* the cwd's, then each mount's */
	bool has_port = false;
	size_t nenv = 0;
	int ret;

	/* Where it reaches on the host, opened and checked now, as it is
	 * used: runc binds the directories that were checked. */
	ret = function_host_paths(b->allow, spec, b->image, dir, hp);
	if (ret)
		return ret;
	binds = calloc(4 + spec->nmounts, sizeof(*binds));
	src = calloc(spec->nmounts + 1, sizeof(*src));
	if (!binds || !src) {
		pr_err("out of memory");
		ret = -ENOMEM;
		goto out;
	}
	if (hp->rootfs[0] && b->image && b->userns && b->userns->size) {
		ret = use_image_root(b, hp, cache_root, sizeof(cache_root));
		if (ret)
			goto out;
		o.mountpoints_in = cache_root;
	}
	if (hp->rootfs[0])
		o.rootfs = hp->rootfs;
	/* The function learns its port from $PORT unless the spec sets it. */
	for (; spec->env && spec->env[nenv]; nenv++)
		has_port |= !strncmp(spec->env[nenv], "PORT=", 5);
	env = calloc(nenv + 5, sizeof(char *));
	if (!env) {
		pr_err("out of memory");
		ret = -ENOMEM;
		goto out;
	}
	if (nenv)
		memcpy(env, spec->env, nenv * sizeof(char *));
	snprintf(port_env, sizeof(port_env), "PORT=%u", spec->port);
	if (!has_port)
		env[nenv++] = port_env;
	if (b->gpumem_preload) {
		size_t i;

		/* Before whatever the function preloads itself. */
		for (i = 0; i < nenv && strncmp(env[i], "LD_PRELOAD=", 11); i++)
			;
		snprintf(preload, sizeof(preload), "LD_PRELOAD=%s/%s%s%s", GPUMEM_IN_DEST,
			 GPUMEM_LIB_NAME, i < nenv ? ":" : "", i < nenv ? env[i] + 11 : "");
		env[i < nenv ? i : nenv++] = preload;
		env[nenv++] = GPUMEM_ENV_IN "=" GPUMEM_IN_DEST;
		env[nenv++] = GPUMEM_ENV_OUT "=" GPUMEM_OUT_DEST;
	}

	snprintf(cgroup, sizeof(cgroup), "thaw/%s", b->container_id);
	o.argv = b->argv ? b->argv : spec->command && spec->command[0] ? spec->command : no_argv;
	o.env = env;
	o.cwd = spec->cwd;
	o.netns_path = b->netns;
	if (b->userns && b->userns->size) {
		if (!b->allow) {
			pr_err("bundle %s: a user namespace needs thaw's configuration", dir);
			ret = -EINVAL;
			goto out;
		}
		o.netns_path = NULL;
		o.userns_base = b->userns->base;
		o.userns_size = b->userns->size;
		/* Host directories with submounts (GPU hosts' /usr) are bound
		 * from a staging mount of their own there (common/host_stage.h). */
		snprintf(stage, sizeof(stage), "%s/stage", b->allow->data_dir);
		o.host_stage = stage;
	}
	o.binds = binds;
	/* The function's own directory, read-only at the same path. */
	if (hp->cwd) {
		snprintf(src[spec->nmounts], sizeof(src[0]), "%s/cwd", hp->stage);
		binds[o.nbinds++] = (struct oci_bind){ .src = src[spec->nmounts],
						       .dst = spec->cwd };
	}
	/* restore/mapped.h: the snapshot's memory files at a mapped restore,
	 * an empty directory otherwise (at the snapshot, so that runc declares
	 * the mount external and a restore can point it elsewhere). */
	if (b->mapped_src)
		binds[o.nbinds++] = (struct oci_bind){ .src = b->mapped_src,
						       .dst = OCI_MAPPED_DEST,
						       .flags = OCI_BIND_INERT };
	if (b->gpumem_in && b->gpumem_out) {
		binds[o.nbinds++] = (struct oci_bind){ .src = b->gpumem_in,
						       .dst = GPUMEM_IN_DEST,
						       .flags = OCI_BIND_NODEV };
		binds[o.nbinds++] = (struct oci_bind){ .src = b->gpumem_out,
						       .dst = GPUMEM_OUT_DEST,
						       .writable = true };
	}
	/* The spec's "mounts", from the sources checked above. */
	for (size_t i = 0; i < spec->nmounts; i++) {
		snprintf(src[i], sizeof(src[i]), "%s/%zu", hp->stage, i);
		binds[o.nbinds++] = (struct oci_bind){
			.src = src[i], .dst = spec->mounts[i].destination,
			.writable = !spec->mounts[i].readonly
		};
	}
	o.gpu = spec->gpu;
	o.gpu_minors = b->gpu_minors;
	o.ngpu_minors = b->ngpu_minors;
	o.env_defaults = b->env_defaults;
	o.hostname = spec->id;
	o.cgroups_path = cgroup;
	o.restore = b->restore;
	o.sandbox = spec->sandbox;
	o.shm_bytes = spec->shm_bytes;
	if (b->legacy_sandbox)
		o.sandbox = (struct oci_sandbox){ .writable_root = true, .no_seccomp = true,
						  .host_home = true,
						  .capabilities = oci_legacy_capabilities };
	ret = oci_bundle_write(dir, &o);
	if (!ret && o.userns_size)
		ret = reach(b, dir, hp);
out:
	if (ret)
		function_host_paths_close(hp);
	free(env);
	free(binds);
	free(src);
	return ret;
}

char **function_bundle_args(const char *bundle)
{
	char p[PATH_MAX + 16];
	json_error_t jerr;
	json_t *cfg, *args;
	char **argv = NULL;
	size_t n;

	snprintf(p, sizeof(p), "%s/config.json", bundle);
	cfg = json_load_file(p, 0, &jerr);
	args = json_object_get(json_object_get(cfg, "process"), "args");
	n = json_array_size(args);
	if (n && (argv = calloc(n + 1, sizeof(char *))))
		for (size_t i = 0; i < n; i++)
			argv[i] = strdup(json_string_value(json_array_get(args, i)) ?: "");
	json_decref(cfg);
	return argv;
}

void function_argv_free(char **argv)
{
	for (size_t i = 0; argv && argv[i]; i++)
		free(argv[i]);
	free(argv);
}
