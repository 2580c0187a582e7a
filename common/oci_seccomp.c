/* SPDX-License-Identifier: Apache-2.0 */
/* oci_seccomp.c — see oci_seccomp.h. */
#include "common/oci_seccomp.h"
#include "common/util.h"

#include <stdbool.h>
#include <string.h>

/* Allowed whatever the arguments.  Names the kernel or runc's libseccomp
 * does not know are skipped by runc, so 32-bit and newer names may stay. */
static const char *const allowed[] = {
	"accept", "accept4", "access", "adjtimex", "alarm", "bind", "brk", "capget", "capset",
	"chdir", "chmod", "chown", "chown32", "clock_adjtime", "clock_adjtime64", "clock_getres",
	"clock_getres_time64", "clock_gettime", "clock_gettime64", "clock_nanosleep",
	"clock_nanosleep_time64", "close", "close_range", "connect", "copy_file_range", "creat",
	"dup", "dup2", "dup3", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old",
	"epoll_pwait", "epoll_pwait2", "epoll_wait", "epoll_wait_old", "eventfd", "eventfd2",
	"execve", "execveat", "exit", "exit_group", "faccessat", "faccessat2", "fadvise64",
	"fadvise64_64", "fallocate", "fanotify_mark", "fchdir", "fchmod", "fchmodat", "fchown",
	"fchown32", "fchownat", "fcntl", "fcntl64", "fdatasync", "fgetxattr", "flistxattr", "flock",
	"fork", "fremovexattr", "fsetxattr", "fstat", "fstat64", "fstatat64", "fstatfs", "fstatfs64",
	"fsync", "ftruncate", "ftruncate64", "futex", "futex_time64", "futex_waitv", "futimesat",
	"getcpu", "getcwd", "getdents", "getdents64", "getegid", "getegid32", "geteuid",
	"geteuid32", "getgid", "getgid32", "getgroups", "getgroups32", "getitimer", "getpeername",
	"getpgid", "getpgrp", "getpid", "getppid", "getpriority", "getrandom", "getresgid",
	"getresgid32", "getresuid", "getresuid32", "getrlimit", "get_robust_list", "getrusage",
	"getsid", "getsockname", "getsockopt", "get_thread_area", "gettid", "gettimeofday",
	"getuid", "getuid32", "getxattr", "inotify_add_watch", "inotify_init", "inotify_init1",
	"inotify_rm_watch", "io_cancel", "ioctl", "io_destroy", "io_getevents", "io_pgetevents",
	"io_pgetevents_time64", "ioprio_get", "ioprio_set", "io_setup", "io_submit",
	"io_uring_enter", "io_uring_register", "io_uring_setup", "ipc", "kill",
	"landlock_add_rule", "landlock_create_ruleset", "landlock_restrict_self", "lchown",
	"lchown32", "lgetxattr", "link", "linkat", "listen", "listxattr", "llistxattr", "_llseek",
	"lremovexattr", "lseek", "lsetxattr", "lstat", "lstat64", "madvise", "membarrier",
	"memfd_create", "memfd_secret", "mincore", "mkdir", "mkdirat", "mknod", "mknodat", "mlock",
	"mlock2", "mlockall", "mmap", "mmap2", "mprotect", "mq_getsetattr", "mq_notify", "mq_open",
	"mq_timedreceive", "mq_timedreceive_time64", "mq_timedsend", "mq_timedsend_time64",
	"mq_unlink", "mremap", "msgctl", "msgget", "msgrcv", "msgsnd", "msync", "munlock",
	"munlockall", "munmap", "name_to_handle_at", "nanosleep", "newfstatat", "_newselect",
	"open", "openat", "openat2", "pause", "pidfd_open", "pidfd_send_signal", "pipe", "pipe2",
	"pkey_alloc", "pkey_free", "pkey_mprotect", "poll", "ppoll", "ppoll_time64", "prctl",
	"pread64", "preadv", "preadv2", "prlimit64", "process_mrelease", "pselect6",
	"pselect6_time64", "pwrite64", "pwritev", "pwritev2", "read", "readahead", "readlink",
	"readlinkat", "readv", "recv", "recvfrom", "recvmmsg", "recvmmsg_time64", "recvmsg",
	"remap_file_pages", "removexattr", "rename", "renameat", "renameat2", "restart_syscall",
	"rmdir", "rseq", "rt_sigaction", "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo",
	"rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait", "rt_sigtimedwait_time64",
	"rt_tgsigqueueinfo", "sched_getaffinity", "sched_getattr", "sched_getparam",
	"sched_get_priority_max", "sched_get_priority_min", "sched_getscheduler",
	"sched_rr_get_interval", "sched_rr_get_interval_time64", "sched_setaffinity",
	"sched_setattr", "sched_setparam", "sched_setscheduler", "sched_yield", "seccomp",
	"select", "semctl", "semget", "semop", "semtimedop", "semtimedop_time64", "send",
	"sendfile", "sendfile64", "sendmmsg", "sendmsg", "sendto", "setfsgid", "setfsgid32",
	"setfsuid", "setfsuid32", "setgid", "setgid32", "setgroups", "setgroups32", "setitimer",
	"setpgid", "setpriority", "setregid", "setregid32", "setresgid", "setresgid32",
	"setresuid", "setresuid32", "setreuid", "setreuid32", "setrlimit", "set_robust_list",
	"setsid", "setsockopt", "set_thread_area", "set_tid_address", "setuid", "setuid32",
	"setxattr", "shmat", "shmctl", "shmdt", "shmget", "shutdown", "sigaltstack", "signalfd",
	"signalfd4", "sigprocmask", "sigreturn", "socketcall", "socketpair", "splice", "stat",
	"stat64", "statfs", "statfs64", "statx", "symlink", "symlinkat", "sync", "sync_file_range",
	"syncfs", "sysinfo", "tee", "tgkill", "time", "timer_create", "timer_delete",
	"timer_getoverrun", "timer_gettime", "timer_gettime64", "timer_settime",
	"timer_settime64", "timerfd_create", "timerfd_gettime", "timerfd_gettime64",
	"timerfd_settime", "timerfd_settime64", "times", "tkill", "truncate", "truncate64",
	"ugetrlimit", "umask", "uname", "unlink", "unlinkat", "utime", "utimensat",
	"utimensat_time64", "utimes", "vfork", "vmsplice", "wait4", "waitid", "waitpid", "write",
	"writev",
	/* Reading and tracing one's own children: the kernel's ptrace
	 * access checks (same uid, no_new_privileges) still apply. */
	"process_vm_readv", "process_vm_writev", "ptrace",
#if defined(__x86_64__)
	"arch_prctl", "modify_ldt",
#elif defined(__aarch64__)
	"arm_fadvise64_64", "arm_sync_file_range", "sync_file_range2", "breakpoint", "cacheflush",
	"set_tls",
#endif
};

/* personality(2) values a program may set: PER_LINUX, UNAME26,
 * ADDR_NO_RANDOMIZE (and with UNAME26), and the query 0xffffffff. */
static const json_int_t personalities[] = { 0x0, 0x8, 0x20000, 0x20008, 0xffffffff };

/* clone flags that make namespaces: CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC,
 * NEWUSER, NEWPID, NEWNET. */
#define CLONE_NS_FLAGS 0x7E020000
#define AF_VSOCK_FAMILY 40
#define ENOSYS_ERRNO 38

/* The filter covers the 32-bit ABIs too: a call through int 0x80 is
 * checked like its 64-bit twin. */
static const char *const architectures[] = {
#if defined(__aarch64__)
	"SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM",
#else
	"SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32",
#endif
};

static json_t *names_list(const char *const *names, size_t n)
{
	json_t *a = json_array();

	for (size_t i = 0; a && i < n; i++)
		json_array_append_new(a, json_string(names[i]));
	return a;
}

static json_t *names_rule(const char *const *names, size_t n, const char *action)
{
	return json_pack("{s:o, s:s}", "names", names_list(names, n), "action", action);
}

/* One syscall allowed when its argument index compares to value. */
static json_t *arg_rule(const char *name, int index, const char *op, json_int_t value)
{
	return json_pack("{s:[s], s:s, s:[{s:i, s:I, s:I, s:s}]}", "names", name, "action",
			 "SCMP_ACT_ALLOW", "args", "index", index, "value", value, "valueTwo",
			 (json_int_t)0, "op", op);
}

static bool has_cap(char *const *caps, const char *name)
{
	for (size_t i = 0; caps && caps[i]; i++)
		if (!strcmp(caps[i], name))
			return true;
	return false;
}

json_t *oci_seccomp_profile(char *const *capabilities)
{
	static const char *const chroot_call[] = { "chroot" };
	static const char *const clone3_call[] = { "clone3" };
	json_t *rules = json_array(), *clone3;

	if (!rules)
		return NULL;
	json_array_append_new(rules, names_rule(allowed, ARRAY_SIZE(allowed), "SCMP_ACT_ALLOW"));
	json_array_append_new(rules, arg_rule("socket", 0, "SCMP_CMP_NE", AF_VSOCK_FAMILY));
	for (size_t i = 0; i < ARRAY_SIZE(personalities); i++)
		json_array_append_new(rules, arg_rule("personality", 0, "SCMP_CMP_EQ",
						      personalities[i]));
	/* Masked-equal: (flags & value) == valueTwo, here 0. */
	json_array_append_new(rules, arg_rule("clone", 0, "SCMP_CMP_MASKED_EQ", CLONE_NS_FLAGS));
	clone3 = names_rule(clone3_call, 1, "SCMP_ACT_ERRNO");
	if (clone3)
		json_object_set_new(clone3, "errnoRet", json_integer(ENOSYS_ERRNO));
	json_array_append_new(rules, clone3);
	if (has_cap(capabilities, "CAP_SYS_CHROOT"))
		json_array_append_new(rules, names_rule(chroot_call, 1, "SCMP_ACT_ALLOW"));
	return json_pack("{s:s, s:i, s:o, s:o}", "defaultAction", "SCMP_ACT_ERRNO",
			 "defaultErrnoRet", 1, "architectures",
			 names_list(architectures, ARRAY_SIZE(architectures)), "syscalls", rules);
}
