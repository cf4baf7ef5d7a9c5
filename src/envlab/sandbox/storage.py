"""The writable storage of one sandbox: ``/app``, ``/tmp`` and an overlay's upper layer, on a
filesystem of their own when ``Limits.storage_bytes`` is set.

As root the default (``storage_fs="auto"``) is ext4 in a sparse image of exactly
``storage_bytes`` on a loop device, mounted ``nosuid,nodev`` under the sandbox's directory: the
host never gives it more than the image's size (a sparse file or a hole inside is still at most
that much), inodes are bounded by ``max_inodes``, and its pages are ordinary page cache. Where
no loop device can be had (a container without ``/dev/loop-control``) it is a tmpfs with
``size=`` and ``nr_inodes=``, whose pages are memory: they count against the sandbox's memory
cgroup (``memory_bytes``) and the host's RAM. Without root there is no such filesystem: envlab
warns once and bounds each file by ``RLIMIT_FSIZE`` (the smaller of ``max_file_bytes`` and
``storage_bytes``) instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from envlab.core.errors import ConfigError
from envlab.sandbox.limits import Limits

log = logging.getLogger(__name__)

MS_NOSUID, MS_NODEV = 2, 4
MNT_DETACH = 2
_SBIN = "/usr/sbin:/sbin:/usr/bin:/bin"
_warned: set[str] = set()


def _warn_once(key: str, msg: str, *args: object) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning(msg, *args)


@cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


@cache
def remove_deep(path: Path) -> None:
    """Delete ``path`` however deep its tree (``rm -rf``: shutil.rmtree recurses, and a
    sandboxed program may leave a tree deeper than Python's recursion limit)."""
    if os.path.lexists(path):
        subprocess.run(["rm", "-rf", "--", str(path)], check=False, capture_output=True)


def _tool(name: str) -> str | None:
    return shutil.which(name, path=_SBIN)


def ext4_possible() -> bool:
    return (
        os.geteuid() == 0
        and os.path.exists("/dev/loop-control")
        and _tool("mkfs.ext4") is not None
        and _tool("mount") is not None
    )


def unmount(path: Path | str) -> bool:
    """Unmount ``path`` (lazily when busy); True when nothing is mounted there any more."""
    target = os.fsencode(str(path))
    if _libc().umount2(target, 0) == 0:
        return True
    err = ctypes.get_errno()
    if err == errno.EBUSY and _libc().umount2(target, MNT_DETACH) == 0:
        return True
    return err in (errno.EINVAL, errno.ENOENT)  # not a mount point (any more)


@dataclass
class Storage:
    """Where a sandbox's writable directories live: ``root/fs`` (a mount point, or a plain
    directory when ``kind`` is ``dir``) holds ``app``, ``tmp``, ``upper`` and ``work``."""

    root: Path
    kind: str
    """``ext4`` (a loop-mounted image), ``tmpfs``, or ``dir`` (no bound but RLIMIT_FSIZE)."""
    capacity: int | None = None

    @property
    def fs(self) -> Path:
        return self.root / "fs"

    @property
    def image(self) -> Path:
        return self.root / "disk.img"

    @classmethod
    def create(cls, root: Path, limits: Limits) -> Storage:
        """Make ``root`` (which must not exist) and, when ``limits`` bound the storage, mount a
        filesystem of that size at ``root/fs``."""
        root.mkdir(mode=0o700)
        (root / "fs").mkdir(mode=0o700)
        want = limits.storage_fs
        if limits.storage_bytes is None:
            return cls(root, "dir")
        if os.geteuid() != 0:
            _warn_once(
                "rootless",
                "storage_bytes=%d bounds each file only (RLIMIT_FSIZE): a filesystem of its own "
                "per sandbox needs root",
                limits.storage_bytes,
            )
            return cls(root, "dir")
        box = cls(root, "tmpfs", limits.storage_bytes)
        if want in ("auto", "ext4") and ext4_possible():
            try:
                box._mount_ext4(limits)
                box.kind = "ext4"
                return box
            except OSError as e:
                if want == "ext4":
                    raise ConfigError(f"cannot make the sandbox's ext4 filesystem: {e}") from e
                _warn_once("ext4", "no loop-mounted ext4 for sandboxes (%s); using tmpfs", e)
        elif want == "ext4":
            raise ConfigError(
                "Limits(storage_fs='ext4') needs root, /dev/loop-control and mkfs.ext4 "
                "(apt-get install e2fsprogs); use storage_fs='auto' to fall back to tmpfs"
            )
        try:
            box._mount_tmpfs(limits)
        except OSError as e:
            if want == "tmpfs":
                raise ConfigError(f"cannot mount the sandbox's tmpfs at {box.fs}: {e}") from e
            _warn_once("tmpfs", "no filesystem of its own for sandboxes (%s): storage_bytes "
                       "bounds each file only (RLIMIT_FSIZE)", e)  # fmt: skip
            return cls(root, "dir")
        return box

    def _mount_ext4(self, limits: Limits) -> None:
        assert limits.storage_bytes is not None
        with open(self.image, "wb") as f:
            f.truncate(limits.storage_bytes)
        inodes = ["-N", str(limits.max_inodes)] if limits.max_inodes else ["-i", "8192"]
        mkfs = [
            str(_tool("mkfs.ext4")), "-q", "-F", "-m", "0", "-b", "4096", *inodes,
            "-O", "^has_journal,^resize_inode", "-E", "lazy_itable_init=1,nodiscard",
            str(self.image),
        ]  # fmt: skip
        opts = "loop,nosuid,nodev,relatime,noinit_itable"
        mount = [str(_tool("mount")), "-t", "ext4", "-o", opts, str(self.image), str(self.fs)]
        for argv in (mkfs, mount):
            res = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            if res.returncode != 0:
                self.image.unlink(missing_ok=True)
                raise OSError(f"`{' '.join(argv)}` failed: {res.stderr.strip()[-300:]}")
        (self.fs / "lost+found").rmdir()

    def _mount_tmpfs(self, limits: Limits) -> None:
        opts = f"size={limits.storage_bytes},mode=0700"
        if limits.max_inodes:
            opts += f",nr_inodes={limits.max_inodes}"
        src, fs = b"envlab", os.fsencode(str(self.fs))
        if _libc().mount(src, fs, b"tmpfs", MS_NOSUID | MS_NODEV, opts.encode()) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"mount -t tmpfs: {os.strerror(err)}")

    def make(self, *names: str) -> list[Path]:
        """Directories of the storage (``app``, ``tmp``, ...), created 0700."""
        out = []
        for name in names:
            (self.fs / name).mkdir(mode=0o700, exist_ok=True)
            out.append(self.fs / name)
        return out

    def remove(self) -> bool:
        """Unmount and delete everything; False when the filesystem could not be unmounted
        (then it is left for ``envlab gc``)."""
        if self.kind != "dir" and not unmount(self.fs):
            log.warning("could not unmount %s; `envlab gc` will retry", self.fs)
            return False
        with contextlib.suppress(FileNotFoundError):
            self.image.unlink()
        remove_deep(self.root)
        return True

    def rlimit_fsize(self, limits: Limits) -> int:
        """RLIMIT_FSIZE for the sandbox's processes."""
        if self.kind == "dir" and limits.storage_bytes is not None:
            return min(limits.max_file_bytes, limits.storage_bytes)
        return limits.max_file_bytes
