/* envlab-enter: the first program of a command in a shared image sandbox, run by nsenter once
 * it has joined the sandbox's namespaces and root. Static, and mounted read-only from the host:
 * nothing of the image runs before it has dropped what Docker does not leave a container.
 *
 *   envlab-enter [--isolate LOGS] CAPS_HEX SECCOMP_FD CWD [NAME=VALUE]... -- PROGRAM [ARG]...
 *
 * 0. --isolate (the verifier of Harbor's shared mode): a private mount namespace with an empty
 *    tmpfs at LOGS, so the agent's live processes cannot write the verifier's reward (they
 *    cannot reach into the verifier's namespace either: its processes hold a capability theirs
 *    lack, which /proc/PID/root, mem and fd demand of another process; see persistent.py);
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
#include <unistd.h>

static int fail(const char *what) {
    fprintf(stderr, "envlab-enter: %s: %s\n", what, strerror(errno));
    return 125;
}

/* A private mount namespace whose LOGS is an empty tmpfs of its own. */
static int isolate(const char *logs) {
    if (unshare(CLONE_NEWNS) != 0) return fail("unshare");
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) return fail("private mounts");
    if (mount("tmpfs", logs, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0777,size=16m") != 0)
        return fail(logs);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[1], "--isolate") == 0) {
        if (isolate(argv[2]) != 0) return 125;
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
