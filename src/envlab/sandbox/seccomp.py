"""A seccomp filter in the spirit of Docker's default profile, as a classic BPF program for
``bwrap --seccomp FD``.

Blocked with ``EPERM``: the kernel keyring (``add_key``, ``request_key``, ``keyctl``: keys
outlive a sandbox and are per uid, so they would carry data from one sandbox to the next),
new namespaces (``unshare``/``clone`` with a ``CLONE_NEW*`` flag, ``setns``), every mount
call, ``ptrace`` and ``process_vm_readv/writev``, ``kcmp``, ``pidfd_getfd``, ``bpf``,
``perf_event_open``, ``userfaultfd``, ``io_uring_*`` (its requests are not filtered), module
loading, ``kexec_*``, ``reboot``, ``swapon/off``, ``acct``, clocks, ``quotactl``, ``syslog``,
file handles. ``chroot`` is allowed, as in Docker's profile: in an image it needs
``CAP_SYS_CHROOT`` (Docker's set; sshd's privilege separation chroots every connection) and
leads nowhere above the sandbox's own root (bwrap pivots the root); in the host mode the
sandbox's user has no capability for it. ``clone3`` gets ``ENOSYS``: its flags live in memory a
filter cannot read, and libc then falls back to ``clone``. A system call of another ABI (i386
``int 0x80`` on x86_64, arm32 on aarch64) kills the process; x32 calls get ``ENOSYS``.
Everything else is allowed.

No library: the program is ~70 instructions, generated here for x86_64 and aarch64 (the syscall
numbers below; tests check them against libseccomp when it is installed).
"""

from __future__ import annotations

import errno
import platform
import struct
from functools import cache

from envlab.core.errors import ConfigError

BLOCKED = (
    "acct", "add_key", "bpf", "clock_adjtime", "clock_settime", "create_module",
    "delete_module", "fanotify_init", "finit_module", "fsconfig", "fsmount", "fsopen", "fspick",
    "get_kernel_syms", "init_module", "io_uring_enter", "io_uring_register", "io_uring_setup",
    "ioperm", "iopl", "kcmp", "kexec_file_load", "kexec_load", "keyctl", "lookup_dcookie",
    "mount", "mount_setattr", "move_mount", "name_to_handle_at", "nfsservctl",
    "open_by_handle_at", "open_tree", "open_tree_attr", "perf_event_open", "pidfd_getfd",
    "pivot_root", "process_vm_readv", "process_vm_writev", "ptrace", "query_module", "quotactl",
    "quotactl_fd", "reboot", "request_key", "setns", "settimeofday", "swapoff", "swapon",
    "syslog", "umount2", "uselib", "userfaultfd",
)  # fmt: skip
"""Denied with EPERM, whatever their arguments (names missing on an architecture are skipped)."""

# fmt: off
SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {
        "acct": 163, "add_key": 248, "bpf": 321, "chroot": 161, "clock_adjtime": 305,
        "clock_settime": 227, "clone": 56, "clone3": 435, "create_module": 174,
        "delete_module": 176, "fanotify_init": 300, "finit_module": 313, "fsconfig": 431,
        "fsmount": 432, "fsopen": 430, "fspick": 433, "get_kernel_syms": 177, "init_module": 175,
        "io_uring_enter": 426, "io_uring_register": 427, "io_uring_setup": 425, "ioperm": 173,
        "iopl": 172, "kcmp": 312, "kexec_file_load": 320, "kexec_load": 246, "keyctl": 250,
        "lookup_dcookie": 212, "mount": 165, "mount_setattr": 442, "move_mount": 429,
        "name_to_handle_at": 303, "nfsservctl": 180, "open_by_handle_at": 304, "open_tree": 428,
        "open_tree_attr": 467, "perf_event_open": 298, "pidfd_getfd": 438, "pivot_root": 155,
        "process_vm_readv": 310, "process_vm_writev": 311, "ptrace": 101, "query_module": 178,
        "quotactl": 179, "quotactl_fd": 443, "reboot": 169, "request_key": 249, "setns": 308,
        "settimeofday": 164, "swapoff": 168, "swapon": 167, "syslog": 103, "umount2": 166,
        "unshare": 272, "uselib": 134, "userfaultfd": 323,
    },
    "aarch64": {  # the generic table (asm-generic/unistd.h)
        "acct": 89, "add_key": 217, "bpf": 280, "chroot": 51, "clock_adjtime": 266,
        "clock_settime": 112, "clone": 220, "clone3": 435, "delete_module": 106,
        "fanotify_init": 262, "finit_module": 273, "fsconfig": 431, "fsmount": 432, "fsopen": 430,
        "fspick": 433, "init_module": 105, "io_uring_enter": 426, "io_uring_register": 427,
        "io_uring_setup": 425, "kcmp": 272, "kexec_file_load": 294, "kexec_load": 104,
        "keyctl": 219, "lookup_dcookie": 18, "mount": 40, "mount_setattr": 442, "move_mount": 429,
        "name_to_handle_at": 264, "nfsservctl": 42, "open_by_handle_at": 265, "open_tree": 428,
        "open_tree_attr": 467, "perf_event_open": 241, "pidfd_getfd": 438, "pivot_root": 41,
        "process_vm_readv": 270, "process_vm_writev": 271, "ptrace": 117, "quotactl": 60,
        "quotactl_fd": 443, "reboot": 142, "request_key": 218, "setns": 268,
        "settimeofday": 170, "swapoff": 225, "swapon": 224, "syslog": 116, "umount2": 39,
        "unshare": 97, "userfaultfd": 282,
    },
}
# fmt: on
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
X32_SYSCALL_BIT = 0x40000000

CLONE_NEWTIME = 0x00000080
CLONE_NEW = 0x7E020000  # NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
"""``clone``'s low byte is the exit signal, so ``CLONE_NEWTIME`` is checked for ``unshare``
only (``clone`` cannot create a time namespace)."""

# classic BPF
_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
RET_KILL_PROCESS, RET_ERRNO, RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
_NR, _ARCH, _ARG0_LO = 0, 4, 16  # offsets in struct seccomp_data (little-endian)


class _Asm:
    """Instructions with forward jumps to named labels, resolved at the end."""

    def __init__(self) -> None:
        self.code: list[tuple[int, int | str, int | str, int]] = []
        self.labels: dict[str, int] = {}

    def op(self, code: int, k: int, jt: int | str = 0, jf: int | str = 0) -> None:
        self.code.append((code, jt, jf, k))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def assemble(self) -> bytes:
        out = bytearray()
        for i, (code, jt, jf, k) in enumerate(self.code):
            offs = [self.labels[j] - i - 1 if isinstance(j, str) else j for j in (jt, jf)]
            if not all(0 <= o < 256 for o in offs):
                raise AssertionError(f"jump out of range at instruction {i}")
            out += struct.pack("<HBBI", code, offs[0], offs[1], k)
        return bytes(out)


def program(arch: str) -> bytes:
    """The filter for ``arch`` (``x86_64`` or ``aarch64``) as ``struct sock_filter[]``."""
    if arch not in SYSCALLS:
        raise ConfigError(
            f"no seccomp filter for the architecture {arch!r} (only x86_64 and aarch64); "
            "run with BubblewrapSandbox(seccomp=False) to go without one"
        )
    nr = SYSCALLS[arch]
    a = _Asm()
    a.op(_LD_W_ABS, _ARCH)
    a.op(_JEQ_K, AUDIT_ARCH[arch], 0, "kill")
    a.op(_LD_W_ABS, _NR)
    if arch == "x86_64":
        a.op(_JGE_K, X32_SYSCALL_BIT, "enosys", 0)
    for name in BLOCKED:
        if name in nr:
            a.op(_JEQ_K, nr[name], "eperm", 0)
    a.op(_JEQ_K, nr["clone3"], "enosys", 0)
    a.op(_JEQ_K, nr["clone"], "clone", 0)
    a.op(_JEQ_K, nr["unshare"], "unshare", 0)
    a.op(_RET_K, RET_ALLOW)
    a.label("clone")
    a.op(_LD_W_ABS, _ARG0_LO)
    a.op(_JSET_K, CLONE_NEW, "eperm", "allow")
    a.label("unshare")
    a.op(_LD_W_ABS, _ARG0_LO)
    a.op(_JSET_K, CLONE_NEW | CLONE_NEWTIME, "eperm", "allow")
    a.label("allow")
    a.op(_RET_K, RET_ALLOW)
    a.label("eperm")
    a.op(_RET_K, RET_ERRNO | errno.EPERM)
    a.label("enosys")
    a.op(_RET_K, RET_ERRNO | errno.ENOSYS)
    a.label("kill")
    a.op(_RET_K, RET_KILL_PROCESS)
    return a.assemble()


@cache
def host_program() -> bytes:
    """The filter for the machine envlab runs on."""
    machine = platform.machine()
    return program({"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine))
