"""The workspace on the host: where sandboxes live, and copies and ownership that never follow
a link the agent may have planted, never expand a sparse file and never split a hard link.

The state directory (``ENVLAB_SANDBOX_DIR``; by default ``/var/lib/envlab/sandbox`` for root,
``~/.cache/envlab/sandbox`` for others) must belong to the current user with mode 0700, and
no directory above it may be writable by another user (unless sticky, like ``/tmp``): it holds
the staged ``/etc`` and the verifier's programs that every sandbox runs, so whoever could
write it could change a grade. envlab refuses anything else with a ``ConfigError``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from envlab.core.errors import ConfigError
from envlab.sandbox.scrub import scrub_tree

_checked: set[Path] = set()


def default_state_dir() -> Path:
    if os.geteuid() == 0:
        return Path("/var/lib/envlab/sandbox")
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(cache) / "envlab" / "sandbox"


def state_dir() -> Path:
    """Where sandboxes keep their workspaces (``ENVLAB_SANDBOX_DIR``), checked to be private."""
    path = Path(os.environ.get("ENVLAB_SANDBOX_DIR") or default_state_dir())
    if path not in _checked:
        private_dir(path, "the sandbox state directory (ENVLAB_SANDBOX_DIR)")
        boxes = path / "boxes"
        if not boxes.is_dir():
            boxes.mkdir(mode=0o700, exist_ok=True)
        _checked.add(path)
    return path


def private_dir(path: Path, what: str) -> Path:
    """Create ``path`` (mode 0700) or check that it is a directory of the current user with no
    access for anyone else, below directories that no other user can write."""
    path = Path(os.path.abspath(path))
    _check_ancestors(path, what)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    st = os.lstat(path)
    me = os.geteuid()
    fix = (
        "Remove it, or point ENVLAB_SANDBOX_DIR at a directory that you own with mode 0700 "
        "(mkdir -m 700 DIR)."
    )
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{what} {path} is not a directory (a symlink or a file). {fix}")
    if st.st_uid != me:
        raise ConfigError(
            f"{what} {path} belongs to uid {st.st_uid}, not to you (uid {me}): whoever owns it "
            f"can change what sandboxes run and read what they hold. {fix}"
        )
    if st.st_mode & 0o077:
        raise ConfigError(
            f"{what} {path} has mode {stat.S_IMODE(st.st_mode):04o}: other users can reach "
            f"it. Run `chmod 700 {path}` (or remove it and let envlab create it)."
        )
    return path


def _check_ancestors(path: Path, what: str) -> None:
    """Every existing directory above ``path`` is root's or ours, and writable by no one else
    unless it is sticky (then no one else can rename what we put in it). Missing ones are
    created 0755."""
    me = os.geteuid()
    for parent in reversed(path.parents):
        try:
            st = os.stat(parent)
        except FileNotFoundError:
            with contextlib.suppress(FileExistsError):
                parent.mkdir(mode=0o755)
            st = os.stat(parent)
        sticky = bool(st.st_mode & stat.S_ISVTX)
        if st.st_uid not in (0, me) or (st.st_mode & 0o022 and not sticky):
            raise ConfigError(
                f"{what} {path} lies below {parent} (uid {st.st_uid}, mode "
                f"{stat.S_IMODE(st.st_mode):04o}), which another user can change. Choose a "
                "location below directories only you or root can write (ENVLAB_SANDBOX_DIR)."
            )


def chown_tree(root: Path, uid: int, gid: int) -> None:
    """Give ``root`` and everything below it to ``uid``; never follows a symlink."""
    os.chown(root, uid, gid, follow_symlinks=False)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), uid, gid, follow_symlinks=False)


# --- copies ----------------------------------------------------------------------------------
def copy_tree(src: Path, dst: Path) -> None:
    """Copy a workspace: symlinks stay symlinks, hard links stay hard links (one copy of the
    data), holes of sparse files stay holes, special files (FIFOs, sockets, devices) are left
    out; modes and modification times are kept, owners and extended attributes are not."""
    links: dict[tuple[int, int], str] = {}
    os.makedirs(dst, exist_ok=True)
    dirs: list[tuple[str, os.stat_result]] = [(str(dst), os.lstat(src))]
    _copy_dir(str(src), str(dst), links, dirs)
    for path, st in reversed(dirs):  # after their contents, so that writes do not bump them
        os.chmod(path, stat.S_IMODE(st.st_mode))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _copy_dir(
    src: str,
    dst: str,
    links: dict[tuple[int, int], str],
    dirs: list[tuple[str, os.stat_result]],
) -> None:
    with os.scandir(src) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        s, d = entry.path, os.path.join(dst, entry.name)
        st = entry.stat(follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(s), d)
            os.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
        elif stat.S_ISDIR(st.st_mode):
            os.makedirs(d, mode=0o700, exist_ok=True)
            dirs.append((d, st))
            _copy_dir(s, d, links, dirs)
        elif stat.S_ISREG(st.st_mode):
            key = (st.st_dev, st.st_ino)
            if st.st_nlink > 1 and key in links:
                os.link(links[key], d)
                continue
            copy_file(s, d, st)
            if st.st_nlink > 1:
                links[key] = d
        # FIFOs, sockets and device nodes are not part of a workspace


def copy_file(src: str, dst: str, st: os.stat_result | None = None) -> None:
    """Copy one regular file without following links, data segments only (holes stay holes)."""
    fin = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = st or os.fstat(fin)
        fout = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            _copy_data(fin, fout, st.st_size)
            os.ftruncate(fout, st.st_size)
            os.fchmod(fout, stat.S_IMODE(st.st_mode))
            os.utime(fout, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(fout)
    finally:
        os.close(fin)


def _copy_data(fin: int, fout: int, size: int) -> None:
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fin, pos, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:  # only a hole from here to the end
                return
            raise
        end = os.lseek(fin, start, os.SEEK_HOLE)
        _copy_range(fin, fout, start, end - start)
        pos = end


def _copy_range(fin: int, fout: int, offset: int, count: int) -> None:
    done = 0
    while done < count:
        n = min(count - done, 64 << 20)
        try:
            copied = os.copy_file_range(fin, fout, n, offset + done, offset + done)
        except OSError as e:
            if e.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise
            copied = _pread_pwrite(fin, fout, offset + done, n)
        if copied == 0:  # the source shrank under us
            return
        done += copied


def _pread_pwrite(fin: int, fout: int, offset: int, count: int) -> int:
    data = os.pread(fin, min(count, 1 << 20), offset)
    written = 0
    while written < len(data):
        written += os.pwrite(fout, data[written:], offset + written)
    return len(data)


__all__ = [
    "chown_tree",
    "copy_file",
    "copy_tree",
    "default_state_dir",
    "private_dir",
    "scrub_tree",
    "state_dir",
]
