"""Prepare a task's workspace once per content hash; every episode then starts from a copy.

The Dockerfile, read by ``dockerfile``, is checked and projected by ``host_plan`` onto what a
sandbox over the host's root can honour, and its steps are done (``build_steps``) in one
bubblewrap sandbox whose ``/app`` is the workspace being built. A task without a Dockerfile
gets every file of ``environment/`` in ``/app``, then ``setup.sh`` runs.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from pydantic import BaseModel, Field

from envlab.sandbox import APP, BubblewrapSandbox, Limits, Sandbox
from envlab.sandbox.image.store import ImageConfig
from envlab.sandbox.tasks.build_steps import Steps, walk
from envlab.sandbox.tasks.dockerfile import (
    Copy,
    DockerfileError,
    Run,
    Setting,
    Stage,
    Step,
    Workdir,
    parse_stages,
)
from envlab.sandbox.tasks.source import TaskSource
from envlab.sandbox.workspace import chown_tree

BUILDER_VERSION = "3"
SETUP_SCRIPT = "setup.sh"
_locks: weakref.WeakValueDictionary[tuple[int, str], asyncio.Lock] = weakref.WeakValueDictionary()
"""One build at a time per (event loop, build key); a lock lives while a build holds it."""

_ROOT = ("root", "0", "0:0", "root:root")
_IGNORED = {"LABEL", "MAINTAINER", "EXPOSE", "CMD", "ENTRYPOINT", "HEALTHCHECK",
            "STOPSIGNAL", "VOLUME"}  # fmt: skip
"""Recorded and ignored in the host mode (and ``USER root``)."""


@dataclass(slots=True)
class BuildPlan:
    """What to do in the workspace, in order, and the state it is left in."""

    steps: list[Step] = field(default_factory=list)
    workdir: str = APP
    env: dict[str, str] = field(default_factory=dict)
    base_image: str | None = None
    notes: list[str] = field(default_factory=list)


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
            plan.steps.append(Run(0, argv, APP, (), f"bash {SETUP_SCRIPT}"))
    return plan


def parse_dockerfile(text: str, *, source: str = "Dockerfile") -> BuildPlan:
    """The host mode's plan of the Dockerfile ``text`` (``FROM`` optional)."""
    stages = parse_stages(
        text, source=source, base_config=lambda _ref: ImageConfig(workdir=APP), need_from=False
    )
    return host_plan(stages, source)


def _inside_app(path: str) -> bool:
    return path == APP or path.startswith(APP + "/")


def host_plan(stages: list[Stage], source: str) -> BuildPlan:
    """``stages`` as a build over the workspace ``/app`` on the host's system, or an error
    naming the first line the host mode cannot honour."""

    def fail(line: int, text: str, why: str) -> DockerfileError:
        return DockerfileError(f"{source}:{line}: `{text}`: {why}")

    if len(stages) > 1:
        why = "multi-stage builds are not supported (one FROM only)"
        raise fail(stages[1].line, stages[1].text, why)
    stage = stages[0]
    plan = BuildPlan(
        workdir=stage.config.workdir, env=dict(stage.config.env), base_image=stage.base or None
    )
    if stage.base:
        plan.notes.append(
            f"{source}:{stage.line}: FROM {stage.base} is not met: there is no image; "
            "commands run on the host's system directories, read-only"
        )
    for item in sorted([*stage.steps, *stage.settings], key=lambda s: s.line):
        if isinstance(item, Setting):
            if item.keyword == "USER" and item.value not in _ROOT:
                why = "switching users is not supported: every command runs as the sandbox's own "
                raise fail(item.line, item.text, why + "unprivileged user")
            if item.keyword == "USER":
                plan.notes.append(
                    f"{source}:{item.line}: USER root ignored (the sandbox user is used)"
                )
            elif item.keyword in _IGNORED:
                plan.notes.append(f"{source}:{item.line}: {item.keyword} ignored")
            continue
        if why := _host_refusal(item):
            raise fail(item.line, item.text, why)
        plan.steps.append(replace(item, chown=None) if isinstance(item, Copy) else item)
    return plan


def _host_refusal(step: Step) -> str | None:
    """Why the host mode cannot honour ``step``, or None."""
    if isinstance(step, Workdir) and not _inside_app(step.path):
        return f"the workspace is {APP}: use WORKDIR {APP} or a directory below"
    if isinstance(step, Run) and step.flags:
        return "RUN flags (--mount, --network, ...) are not supported"
    if not isinstance(step, Copy):
        return None
    if step.from_stage is not None:
        return "--from is not supported (only local files can be copied)"
    for s in step.sources:
        if "://" in s:
            return "URLs cannot be fetched at build time; vendor the file"
        if s.startswith("/"):
            return f"source {s!r} is outside the build context (environment/)"
    if not _inside_app(step.dest.rstrip("/") or "/"):
        return f"destination {step.dest!r} is outside the workspace {APP}"
    return None


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
    network = task.config.network_for("setup")
    box = await BubblewrapSandbox.create(
        app_dir=app,
        network=network,
        limits=Limits(memory_bytes=(cfg.memory_mb or 4096) << 20),
        env={**plan.env, **cfg.env},
        name=f"build-{task.name}",
    )
    hint = (
        "Build commands run as an unprivileged user on the host's read-only system"
        + ("" if network else " without network")
        + ": install system packages on the host, vendor downloads into environment/."
    )
    try:
        steps = await asyncio.to_thread(Steps, task, _source(task), hint=hint)
        await walk(plan.steps, _Workspace(box), steps)
    finally:
        await box.close()


@dataclass
class _Workspace:
    """Where the host mode's steps land: the one sandbox over the workspace being built."""

    box: Sandbox

    @asynccontextmanager
    async def open(self, _step: Step) -> AsyncIterator[Sandbox]:
        yield self.box


def _source(task: TaskSource) -> str:
    return str((task.dockerfile or task.environment_dir).relative_to(task.path.parent))
