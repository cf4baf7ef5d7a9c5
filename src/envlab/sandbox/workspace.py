"""The workspace on the host: where sandboxes live, and copies and ownership that never follow
a link the agent may have planted."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

_made: set[Path] = set()


def state_dir() -> Path:
    """Where sandboxes keep their workspaces and uid locks (``ENVLAB_SANDBOX_DIR``)."""
    path = Path(os.environ.get("ENVLAB_SANDBOX_DIR", "/tmp/envlab-sandbox"))
    if path not in _made:
        path.mkdir(mode=0o711, parents=True, exist_ok=True)
        (path / "boxes").mkdir(mode=0o711, exist_ok=True)
        _made.add(path)
    return path


def chown_tree(root: Path, uid: int, gid: int) -> None:
    """Give ``root`` and everything below it to ``uid``; never follows a symlink."""
    os.chown(root, uid, gid, follow_symlinks=False)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), uid, gid, follow_symlinks=False)


def copy_tree(src: Path, dst: Path) -> None:
    """Copy a workspace template: symlinks stay symlinks, special files are skipped."""
    shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True, ignore=_special_files)


def _special_files(directory: str, names: list[str]) -> list[str]:
    skip = []
    for name in names:
        p = os.path.join(directory, name)
        if not (os.path.islink(p) or os.path.isfile(p) or os.path.isdir(p)):
            skip.append(name)
    return skip
