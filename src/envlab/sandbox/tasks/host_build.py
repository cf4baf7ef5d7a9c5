"""Prepare a task's workspace once per content hash; every episode then starts from a copy.

The Dockerfile subset (see ``dockerfile``) is executed in a bubblewrap sandbox whose ``/app`` is
the workspace being built: ``COPY`` streams files in as a tar archive, ``RUN`` runs there. A task
without a Dockerfile gets every file of ``environment/`` in ``/app``, then ``setup.sh`` runs.
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
import io
import json
import os
import shlex
import shutil
import sys
import tarfile
import tempfile
import time
import warnings
import weakref
from pathlib import Path

from pydantic import BaseModel, Field

from envlab.sandbox import BubblewrapSandbox, Limits, Sandbox
from envlab.sandbox.tasks.dockerfile import (
    APP,
    BuildPlan,
    Copy,
    DockerfileError,
    Run,
    parse_dockerfile,
)
from envlab.sandbox.tasks.source import TaskSource
from envlab.sandbox.workspace import chown_tree

BUILDER_VERSION = "2"
SETUP_SCRIPT = "setup.sh"
_locks: weakref.WeakValueDictionary[tuple[int, str], asyncio.Lock] = weakref.WeakValueDictionary()
"""One build at a time per (event loop, build key); a lock lives while a build holds it."""


class PreparedWorkspace(BaseModel):
    """A built workspace in the cache, and the state its Dockerfile left."""

    app_dir: Path
    workdir: str = APP
    env: dict[str, str] = Field(default_factory=dict)
    base_image: str | None = None
    notes: list[str] = Field(default_factory=list)
    key: str
    build_s: float = 0.0
    digest: str = ""
    """``workspace_digest`` of the built workspace (what every episode's reset copies)."""


def cache_root() -> Path:
    """``ENVLAB_CACHE_DIR`` (default ``~/.cache/envlab``) / ``workspaces``."""
    base = os.environ.get("ENVLAB_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "envlab"
    )
    root = Path(base) / "workspaces"
    root.mkdir(parents=True, exist_ok=True)
    return root


def build_key(task: TaskSource) -> str:
    """Name of the cached build: what the build depends on, hashed."""
    env = task.config.environment.model_dump(mode="json")
    what = json.dumps([BUILDER_VERSION, sys.version, env], sort_keys=True)
    digest = hashlib.sha256((task.content_hash(("environment",)) + what).encode()).hexdigest()
    return f"{task.name}-{digest[:16]}"


def plan_for(task: TaskSource) -> BuildPlan:
    """The build plan: the Dockerfile's, or 'copy environment/ and run setup.sh'."""
    if task.dockerfile is not None:
        return parse_dockerfile(
            task.dockerfile.read_text(), source=str(task.dockerfile.relative_to(task.path.parent))
        )
    plan = BuildPlan()
    env_dir = task.environment_dir
    if env_dir.is_dir():
        if any(p.name != SETUP_SCRIPT for p in env_dir.iterdir()):
            plan.steps.append(Copy(0, (".",), APP + "/", exclude=(SETUP_SCRIPT,)))
        if (env_dir / SETUP_SCRIPT).is_file():
            plan.steps.append(Copy(0, (SETUP_SCRIPT,), "/tmp/envlab-setup.sh"))
            argv = ("bash", "/tmp/envlab-setup.sh")
            plan.steps.append(Run(0, argv, APP, (), f"environment/{SETUP_SCRIPT}"))
    return plan


async def prepare_workspace(task: TaskSource) -> PreparedWorkspace:
    """The task's built workspace, from the cache or built now (once, even when asked at once).
    Every file operation runs in a worker thread, never on the event loop."""
    key, prepared = await asyncio.to_thread(_cached, task)
    if prepared is not None:
        _warn_unmet_base(prepared.base_image, task)
        return prepared
    lock = _locks.setdefault((id(asyncio.get_running_loop()), key), asyncio.Lock())
    async with lock:
        key, prepared = await asyncio.to_thread(_cached, task)
        if prepared is not None:
            _warn_unmet_base(prepared.base_image, task)
            return prepared
        plan = await asyncio.to_thread(plan_for, task)
        _warn_unmet_base(plan.base_image, task)
        tmp = await asyncio.to_thread(_build_dir, key)
        try:
            t0 = time.perf_counter()
            await _execute(task, plan, tmp / "app")
            return await asyncio.to_thread(_store, tmp, plan, key, t0)
        except BaseException:
            await asyncio.to_thread(shutil.rmtree, tmp, True)
            raise


_warned_bases: set[str] = set()
"""Base images already warned about in this process: one line per image per run."""


def _warn_unmet_base(image: str | None, task: TaskSource) -> None:
    """Say once per run, per image, that a ``FROM`` is not met (built or from the cache)."""
    if image is None or image in _warned_bases:
        return
    _warned_bases.add(image)
    warnings.warn(
        f"FROM {image} is not met: there is no image; commands run on the host's system "
        f"directories, read-only (first in task {task.name}; said once per run)",
        RuntimeWarning,
        stacklevel=3,
    )


def _cached(task: TaskSource) -> tuple[str, PreparedWorkspace | None]:
    """The build key of ``task`` and its build, if the cache has it."""
    key = build_key(task)
    meta = cache_root() / key / "build.json"
    return key, PreparedWorkspace.model_validate_json(meta.read_text()) if meta.is_file() else None


def _build_dir(key: str) -> Path:
    tmp = Path(tempfile.mkdtemp(prefix=f".build-{key}-", dir=cache_root()))
    (tmp / "app").mkdir()
    return tmp


def _store(tmp: Path, plan: BuildPlan, key: str, t0: float) -> PreparedWorkspace:
    """Put the build made in ``tmp`` into the cache (or use one another process put there)."""
    if os.geteuid() == 0:  # the build uid is released: the cache belongs to root
        chown_tree(tmp / "app", 0, 0)
    dest = cache_root() / key
    prepared = PreparedWorkspace(
        app_dir=dest / "app",
        workdir=plan.workdir,
        env=plan.env,
        base_image=plan.base_image,
        notes=plan.notes,
        key=key,
        build_s=time.perf_counter() - t0,
        digest=workspace_digest(tmp / "app"),
    )
    (tmp / "build.json").write_text(prepared.model_dump_json(indent=2))
    try:
        tmp.rename(dest)
    except OSError:  # built by another process meanwhile: use theirs
        shutil.rmtree(tmp, ignore_errors=True)
    return PreparedWorkspace.model_validate_json((dest / "build.json").read_text())


def workspace_digest(root: Path, *, max_file_bytes: int = 16 << 20) -> str:
    """sha256 over the relative paths, modes and contents of a tree (large files: their size)."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        st = path.lstat()
        h.update(f"{rel}\0{st.st_mode:o}\0".encode())
        if path.is_symlink():
            h.update(os.readlink(path).encode())
        elif path.is_file():
            if st.st_size > max_file_bytes:
                h.update(f"size:{st.st_size}".encode())
            else:
                h.update(path.read_bytes())
    return h.hexdigest()[:16]


async def _execute(task: TaskSource, plan: BuildPlan, app: Path) -> None:
    cfg = task.config.environment
    deadline = time.monotonic() + cfg.build_timeout_sec
    box = await BubblewrapSandbox.create(
        app_dir=app,
        network=task.config.network_for("setup"),
        limits=Limits(memory_bytes=(cfg.memory_mb or 4096) << 20),
        env={**plan.env, **cfg.env},
        name=f"build-{task.name}",
    )
    try:
        ignore = await asyncio.to_thread(_dockerignore, task.environment_dir)
        for step in plan.steps:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DockerfileError(
                    f"task {task.name}: the build took longer than "
                    f"[environment] build_timeout_sec = {cfg.build_timeout_sec}"
                )
            if isinstance(step, Copy):
                await _copy(box, task, step, ignore)
            else:
                await _run(box, task, step, left)
    finally:
        await box.close()


async def _run(box: Sandbox, task: TaskSource, step: Run, timeout: float) -> None:
    res = await box.exec(list(step.argv), cwd=step.workdir, env=dict(step.env), timeout=timeout)
    if res.ok:
        return
    where = f"{_source(task)}:{step.line}" if step.line else _source(task)
    why = "timed out" if res.timed_out else f"exited with code {res.exit_code}"
    tail = (res.stderr.strip() or res.stdout.strip())[-1500:]
    raise DockerfileError(
        f"{where}: `RUN {step.text}` {why}:\n{tail}\n"
        "Build commands run as an unprivileged user on the host's read-only system"
        + ("" if task.config.network_for("setup") else " without network")
        + ": install system packages on the host, vendor downloads into environment/."
    )


def _source(task: TaskSource) -> str:
    return str((task.dockerfile or task.environment_dir).relative_to(task.path.parent))


def _dockerignore(context: Path) -> list[str]:
    f = context / ".dockerignore"
    if not f.is_file():
        return []
    lines = [ln.strip() for ln in f.read_text().splitlines()]
    return [ln.rstrip("/") for ln in lines if ln and not ln.startswith(("#", "!"))]


def _ignored(rel: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatch(rel, p) or rel.startswith(p + "/") for p in patterns)


async def _copy(box: Sandbox, task: TaskSource, step: Copy, ignore: list[str]) -> None:
    where = f"{_source(task)}:{step.line}" if step.line else _source(task)
    archive, script, target = await asyncio.to_thread(_copy_archive, task, step, ignore, where)
    _, res = await box.exec_bytes(["sh", "-c", script], stdin=archive, timeout=300)
    if res.exit_code != 0:
        raise DockerfileError(f"{where}: copying into {target} failed: {res.stderr[-800:]}")


def _copy_archive(
    task: TaskSource, step: Copy, ignore: list[str], where: str
) -> tuple[bytes, str, str]:
    """The tar archive of a ``COPY``'s sources, the script that unpacks it, and its target."""
    context = task.environment_dir.resolve()
    matched: list[Path] = []
    for pattern in step.sources:
        hits = sorted(context.glob(pattern)) if any(c in pattern for c in "*?[") else [
            context / pattern
        ]  # fmt: skip
        hits = [h for h in hits if h.exists() and h.resolve().is_relative_to(context)]
        if not hits:
            raise DockerfileError(f"{where}: COPY source {pattern!r} not found in {context}")
        matched += hits
    archive = step.extract and matched[0].is_file() and tarfile.is_tarfile(matched[0])
    single_file = len(matched) == 1 and matched[0].is_file() and not archive
    single_file = single_file and not step.dest.endswith("/")
    buf = io.BytesIO()
    names: list[str] = []
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for src in matched:
            if step.extract and src.is_file() and tarfile.is_tarfile(src):
                _append_archive(tar, src)
            elif src.is_dir():
                for child in sorted(src.rglob("*")):
                    rel = child.relative_to(context).as_posix()
                    if not _ignored(rel, [*ignore, *step.exclude]):
                        arcname = child.relative_to(src).as_posix()
                        tar.add(child, arcname=arcname, recursive=False)
                        names.append(arcname)
            else:
                tar.add(src, arcname=src.name, recursive=False)
                names.append(src.name)
    if single_file:
        # Docker: a destination without a trailing slash is the file's new name, unless it is
        # an existing directory
        target = step.dest
        d, name = shlex.quote(target), shlex.quote(matched[0].name)
        script = (
            f"if [ -d {d} ]; then tar -x --no-same-owner -f - -C {d}; else "
            f'mkdir -p -- "$(dirname -- {d})" && t=$(mktemp -d) && '
            f'tar -x --no-same-owner -f - -C "$t" && mv -f -- "$t"/{name} {d}; fi'
        )
        names = [target]
    else:
        target = step.dest.rstrip("/")
        q = shlex.quote(target)
        script = f"mkdir -p -- {q} && tar -x --no-same-owner -f - -C {q}"
        names = [f"{target}/{n}" for n in names]
    if step.chmod is not None:
        quoted = " ".join(shlex.quote(n) for n in names)
        script += f" && chmod {step.chmod:o} -- {quoted}"
    return buf.getvalue(), script, target


def _append_archive(tar: tarfile.TarFile, archive: Path) -> None:
    """ADD of a local archive: its members, uncompressed, filtered like a safe extraction."""
    with tarfile.open(archive) as src:
        for original in src.getmembers():
            try:
                member = tarfile.data_filter(original, "/")
            except tarfile.FilterError as e:
                raise DockerfileError(f"ADD {archive.name}: unsafe archive member: {e}") from e
            member = member.replace(uid=0, gid=0, uname="", gname="", deep=False)
            fileobj = src.extractfile(original) if member.isfile() else None
            tar.addfile(member, fileobj)
