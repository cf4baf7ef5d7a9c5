"""Keep an image's stack of layers mountable: overlayfs takes every lower layer in one mount
option of at most a page (4096 bytes), which a deep Dockerfile's layers (60 instructions, at
full paths) overflow. Then the lowest layers are squashed into one root filesystem (their
merged view, copied once and cached under the key of the layers it replaces); what the image
holds is unchanged, only fewer directories are stacked.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from envlab.core.errors import InfraError
from envlab.sandbox.image.store import (
    commit,
    content_key,
    images_root,
    locked,
    remove_tree,
    scratch,
)

OPTION_BUDGET = 3000
"""Bytes of lowerdir paths one mount may take (the rest of the page: upper, work, options)."""
_PREFIX = len("/oldroot")


def option_bytes(lowers: list[Path]) -> int:
    return sum(len(str(p)) + _PREFIX + 1 for p in lowers)


def fit(lowers: list[Path], extra: list[Path] = ()) -> list[Path]:  # type: ignore[assignment]
    """``lowers`` as they are when they fit with ``extra`` on top; else with the lowest
    squashed into one layer (built once)."""
    budget = OPTION_BUDGET - option_bytes(list(extra))
    if option_bytes(lowers) <= budget:
        return lowers
    keep: list[Path] = []
    for layer in reversed(lowers):  # the highest layers stay as they are
        if option_bytes([*keep, layer]) + 200 > budget // 2:
            break
        keep.insert(0, layer)
    below = lowers[: len(lowers) - len(keep)]
    return [squash(below), *keep]


def squash(lowers: list[Path]) -> Path:
    """One root filesystem holding the merged view of ``lowers`` (cached)."""
    if option_bytes(lowers) > OPTION_BUDGET:  # squash in steps, lowest first
        half = len(lowers) // 2
        lowers = [squash(lowers[:half]), *lowers[half:]]
    key = content_key("squash", [str(p) for p in lowers])
    final = images_root() / "layers" / f"squash-{key}"
    if (final / "rootfs").is_dir():
        return final / "rootfs"
    with locked(f"squash-{key}"):
        if (final / "rootfs").is_dir():
            return final / "rootfs"
        tmp = scratch("squash")
        for sub in ("rootfs", "upper", "work"):
            (tmp / sub).mkdir()
        try:
            _copy_merged(lowers, tmp)
        except BaseException:
            remove_tree(tmp)
            raise
        remove_tree(tmp / "upper")
        remove_tree(tmp / "work")
        commit(tmp, final)
    return final / "rootfs"


def _copy_merged(lowers: list[Path], tmp: Path) -> None:
    from envlab.sandbox.base import Mount
    from envlab.sandbox.image.runner import image_args

    out = "/.envlab-squash"
    argv = image_args(
        lowers, (tmp / "upper", tmp / "work"), network=False,
        mounts=[Mount(tmp / "rootfs", out, writable=True)],
    )  # fmt: skip
    script = f"tar -C / --one-file-system --exclude=.{out} -cf - . | tar -C {out} -xpf -"
    proc = subprocess.run([*argv, "--", "/bin/sh", "-c", script], capture_output=True, text=True)
    if proc.returncode != 0:
        raise InfraError(f"could not squash {len(lowers)} layers: {proc.stderr[-800:]}")
