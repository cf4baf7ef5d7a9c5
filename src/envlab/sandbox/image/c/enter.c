/* envlab-enter: the first program of a command in a shared image sandbox, run by nsenter once
 * it has joined the sandbox's namespaces and root. Static, and mounted read-only from the host:
 * nothing of the image runs before it has dropped what Docker does not leave a container.
 *
 *   envlab-enter [--isolate LOGS] CAPS_HEX SECCOMP_FD CWD [NAME=VALUE]... -- PROGRAM [ARG]...
 *
 * 0. --isolate (the verifier of Harbor's shared mode; nsenter has joined every namespace but the
 *    sandbox's PID namespace): a new PID namespace (a sibling of the agent's, whose processes
 *    therefore cannot see, signal or reach into the verifier's: no /proc/PID/root) and a private
 *    mount namespace with a fresh /proc (its /proc/sys and the kernel's control files read-only
 *    or masked, as Docker's) and an empty tmpfs at LOGS (the agent's live processes cannot
 *    write the verifier's reward); this process waits for that namespace's first process;
 * 1. the seccomp filter read from SECCOMP_FD (a classic BPF program) is installed;
 * 2. every capability not in CAPS_HEX leaves the bounding set, and the process's sets become
 *    CAPS_HEX (inheritable and ambient empty);
 * 3. the environment becomes exactly the NAME=VALUE arguments; the directory CWD
 *    (exit 201 and "envlab: no such directory" when it is not there);
 * 4. PROGRAM (an absolute path) is executed. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static int fail(const char *what) {
    fprintf(stderr, "envlab-enter: %s: %s\n", what, strerror(errno));
    return 125;
}

static const char *READ_ONLY[] = {"/proc/sys", "/proc/sysrq-trigger", "/proc/bus", "/proc/fs",
                                  "/proc/irq", NULL};
static const char *MASKED[] = {"/proc/kcore", "/proc/keys", "/proc/timer_list",
                               "/proc/sched_debug", NULL};

/* In the new namespaces: a private tree, a fresh /proc as Docker's, an empty LOGS. */
static int isolate_mounts(const char *logs) {
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) return fail("private mounts");
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
        return fail("mount /proc");
    for (int i = 0; READ_ONLY[i]; i++) {
        if (access(READ_ONLY[i], F_OK) != 0) continue;
        if (mount(READ_ONLY[i], READ_ONLY[i], NULL, MS_BIND | MS_REC, NULL) != 0 ||
            mount(NULL, READ_ONLY[i], NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_REC, NULL) != 0)
            return fail(READ_ONLY[i]);
    }
    for (int i = 0; MASKED[i]; i++)
        if (access(MASKED[i], F_OK) == 0 && mount("/dev/null", MASKED[i], NULL, MS_BIND, NULL) != 0)
            return fail(MASKED[i]);
    if (mount("tmpfs", logs, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0777,size=16m") != 0)
        return fail(logs);
    return 0;
}

/* A new PID and mount namespace; the caller waits for its first process and exits as it did. */
static int isolate(const char *logs) {
    if (unshare(CLONE_NEWNS | CLONE_NEWPID) != 0) return fail("unshare");
    pid_t child = fork();
    if (child < 0) return fail("fork");
    if (child == 0) return isolate_mounts(logs) ? 125 : -1;
    int status;
    while (waitpid(child, &status, 0) < 0)
        if (errno != EINTR) return fail("waitpid");
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
}

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[1], "--isolate") == 0) {
        int rc = isolate(argv[2]);
        if (rc >= 0) return rc;
        argv += 2;
        argc -= 2;
    }
    if (argc < 6) return 125;
    unsigned long long keep = strtoull(argv[1], NULL, 16);
    int fd = atoi(argv[2]);
    if (fd >= 0) {
        static struct sock_filter code[4096];
        ssize_t n = read(fd, code, sizeof code);
        if (n <= 0 || n % sizeof(struct sock_filter)) return fail("seccomp program");
        struct sock_fprog prog = {(unsigned short)(n / sizeof(struct sock_filter)), code};
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) return fail("seccomp");
        close(fd);
    }
    for (int cap = 0; cap < 64; cap++)
        if (!((keep >> cap) & 1) && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
            return fail("bounding set");
    struct __user_cap_header_struct head = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof data);
    data[0].effective = data[0].permitted = (unsigned)keep;
    data[1].effective = data[1].permitted = (unsigned)(keep >> 32);
    if (syscall(SYS_capset, &head, data) != 0) return fail("capset");
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    int i = 4;
    if (clearenv() != 0) return fail("clearenv");
    for (; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (putenv(argv[i]) != 0) return fail("putenv");
    if (i + 1 >= argc) return 125;
    if (chdir(argv[3]) != 0) {
        fprintf(stderr, "envlab: no such directory\n");
        return 201;
    }
    execv(argv[i + 1], argv + i + 1);
    fprintf(stderr, "envlab-enter: cannot run %s: %s\n", argv[i + 1], strerror(errno));
    return 127;
}
