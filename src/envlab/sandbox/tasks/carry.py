"""What Harbor's ``separate`` verifier mode carries from the agent's sandbox: its workspace.

The agent's sandbox is an overlay; everything it changed is in its upper layer. Grading in
``separate`` mode starts again from the pristine image, with only the agent's *workspace* (the
image's ``WORKDIR``, ``/app`` in Terminal-Bench) and artifacts (``/logs/artifacts``) carried over:
``carry`` copies those subtrees of the agent's layer into a layer of their own, deletions
(overlay whiteouts) and replaced directories (opaque directories) included, so the verifier sees
the workspace exactly as the agent left it over the image's programs, libraries, configuration
and caches, none of which the agent could touch.

The copy is then scrubbed as the host mode scrubs a workspace: a link whose target leads to the
verifier's own mounts (``/tests``, ``/logs``, envlab's kit) or to the kernel's files (``/proc``,
``/dev``, ``/sys``), FIFOs, sockets and device nodes (other than whiteouts), bytecode the agent
may have forged (``__pycache__``, ``*.pyc``), and every key of a git repository's config that
names a program to run. What was removed is listed (``not_carried``).
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import tomllib
from collections.abc import Sequence
from pathlib import Path

from envlab.sandbox.image.store import Image, images_root, locked, remove_tree
from envlab.sandbox.scrub import scrub_tree

ARTIFACTS = "/logs/artifacts"
"""Harbor's artifacts directory: carried with the workspace."""
VERIFIER_ROOTS = ("/tests", "/logs", "/opt/envlab", "/proc", "/dev", "/sys", "/run/envlab")
"""Where a carried link must not lead: the verifier's own mounts and the kernel's files."""


def is_whiteout(st: os.stat_result) -> bool:
    """An overlay whiteout: a character device 0:0 that records a deletion."""
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


STARTUP_HOOKS = ("sitecustomize", "usercustomize")
"""Python runs these at the start of every interpreter that finds them on its path."""


def carry(
    agent_layer: Path, dest: Path, paths: Sequence[str], image_layers: Sequence[Path] = ()
) -> list[dict[str, str]]:
    """Copy the subtrees ``paths`` (absolute, e.g. ``/app``) of ``agent_layer`` into the layer
    ``dest`` and scrub them; return what was not carried. A path whose parent the agent
    replaced by a link or a file is not carried (the verifier sees the image's own), nor are
    the agent's changes to a Python environment (a directory with ``pyvenv.cfg`` in the agent's
    layer or in ``image_layers``) or Python's start-up hooks: the tools that run the tests come
    from the image, never from the workspace."""
    dest.mkdir(parents=True, exist_ok=True)
    dropped: list[dict[str, str]] = []
    for path in dict.fromkeys(p.rstrip("/") or "/" for p in paths):
        parts = [p for p in path.split("/") if p]
        if not parts:
            raise ValueError("the workspace cannot be / in separate mode: it would carry all")
        src = agent_layer.joinpath(*parts)
        blocked = _blocked_parent(agent_layer, parts)
        if blocked is not None:
            dropped.append({"path": path, "kind": "parent", "target": blocked,
                            "reason": "a parent of the workspace was replaced"})  # fmt: skip
            continue
        if not os.path.lexists(src):
            continue
        target = dest.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        # cp -a keeps whiteouts (device 0:0), the opaque directories' xattrs, holes and modes
        proc = subprocess.run(
            ["cp", "-a", "--reflink=auto", "--", str(src), str(target)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise OSError(f"copying the workspace {path} failed: {proc.stderr.strip()[-500:]}")
        st = os.lstat(target)
        if not stat.S_ISDIR(st.st_mode):  # the workspace itself replaced (a link, a file)
            if not is_whiteout(st):
                os.unlink(target)
                why = "the workspace was replaced by a non-directory"
                dropped.append({"path": path, "kind": "workspace", "target": "", "reason": why})
            continue
        dropped += _drop_tools(target, path, image_layers)
        dropped += [{**d, "path": f"{path}/{d['path']}"} for d in scrub_carried(target, path)]
    return dropped


def _drop_tools(root: Path, mount: str, image_layers: Sequence[Path]) -> list[dict[str, str]]:
    """Remove from the carried ``root`` (seen at ``mount``) the agent's Python environments,
    Python's start-up hooks in any form (a module, a package, an extension) and an in-tree
    build backend (a ``pyproject.toml`` whose ``backend-path`` runs the workspace's own code
    when the tests build or ``uv add`` the project); return them. Entries are judged by name,
    never by following a link the agent left."""
    parts = [p for p in mount.split("/") if p]
    dropped: list[dict[str, str]] = []

    def drop(path: Path, kind: str, why: str) -> None:
        remove_tree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        rel = path.relative_to(root)
        dropped.append({"path": f"{mount}/{rel}", "kind": kind, "target": "", "reason": why})

    stack = [root]
    while stack:
        d = stack.pop()
        rel = d.relative_to(root)
        image_cfg = (layer.joinpath(*parts, rel, "pyvenv.cfg") for layer in image_layers)
        if os.path.lexists(d / "pyvenv.cfg") or any(os.path.lexists(p) for p in image_cfg):
            drop(d, "environment", "a Python environment: the verifier's tools come from the image")
            continue
        with os.scandir(d) as it:
            entries = list(it)
        for e in entries:
            if e.name.partition(".")[0] in STARTUP_HOOKS:
                drop(Path(e.path), "startup-hook", "a Python start-up hook")
            elif e.name == "pyproject.toml" and _in_tree_backend(Path(e.path)):
                drop(Path(e.path), "build-backend", "an in-tree build backend (backend-path)")
            elif e.is_dir(follow_symlinks=False):
                stack.append(Path(e.path))
    return dropped


def _in_tree_backend(path: Path) -> bool:
    """A ``pyproject.toml`` (a regular file) whose ``[build-system]`` names a ``backend-path``."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        data = tomllib.loads(path.read_text(errors="replace")[: 1 << 20])
    except (tomllib.TOMLDecodeError, OSError):
        return "backend-path" in path.read_text(errors="replace")[: 1 << 20]
    system = data.get("build-system")
    return isinstance(system, dict) and "backend-path" in system


def _blocked_parent(layer: Path, parts: list[str]) -> str | None:
    for i in range(1, len(parts)):
        p = layer.joinpath(*parts[:i])
        if os.path.lexists(p) and (p.is_symlink() or not p.is_dir()):
            return "/" + "/".join(parts[:i])
    return None


def scrub_carried(root: Path, mount: str) -> list[dict[str, str]]:
    """Scrub one carried workspace in place (links, special files, bytecode, git configs)."""
    removed = scrub_tree(root, mount=mount, forbidden=VERIFIER_ROOTS)
    from envlab.sandbox.verifier_kit.verifier_run import prepare  # stdlib only, host-side here

    for entry in prepare(str(root)):
        rel = os.path.relpath(entry["path"], root)
        why = "removed" if entry["kind"] == "bytecode" else "rewritten"
        removed.append(
            {"path": rel, "kind": entry["kind"], "target": entry.get("dropped", ""), "reason": why}
        )
    return removed


def materialize(image: Image, workspace: str) -> Path:
    """The workspace ``workspace`` of ``image`` as one host directory (what every episode
    starts from), merged from the image's layers once per image; for readers (``envlab vet``
    scans it for leaked answers). Returns the directory holding the workspace's files."""
    parts = [p for p in workspace.split("/") if p]
    done = images_root() / "views" / image.key
    view = done.joinpath("root", *parts)
    if (done / "done").exists():
        return view
    with locked(f"view-{image.key}"):
        if (done / "done").exists():
            return view
        if done.exists():
            remove_tree(done)
        view.mkdir(parents=True)
        for layer in image.lowers:  # lowest first
            _overlay_onto(layer.joinpath(*parts), view)
        (done / "done").touch()
    return view


def _overlay_onto(src: Path, dest: Path) -> None:
    """Apply one layer's subtree ``src`` onto ``dest`` as overlayfs would show it: opaque
    directories replace what was below, whiteouts delete it, the rest is copied over."""
    if not src.is_dir() or src.is_symlink():
        return
    for root, dirs, names in os.walk(src):
        for n in [*dirs, *names]:
            path = Path(root, n)
            target = dest / path.relative_to(src)
            gone = is_whiteout(os.lstat(path))
            with contextlib.suppress(OSError):
                gone = gone or os.getxattr(path, "trusted.overlay.opaque") == b"y"
            if gone and (target.exists() or target.is_symlink()):
                if target.is_dir() and not target.is_symlink():
                    remove_tree(target)
                else:
                    target.unlink()
    subprocess.run(["cp", "-a", "--remove-destination", "--", f"{src}/.", str(dest)], check=True)
    for root, _dirs, names in os.walk(dest):
        for n in names:
            if is_whiteout(os.lstat(Path(root, n))):
                Path(root, n).unlink()
