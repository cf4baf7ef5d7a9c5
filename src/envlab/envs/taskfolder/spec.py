"""``TerminalEnv``: task folders (one, or a directory of them) as an environment spec.

The spec is the definition: its config (the path, the sandbox backend, the cap of one
command), its tasks (one per folder), the limits of each task (from ``task.toml``) and a
content hash of the code, the config and every task folder's files. ``new_episode()`` makes a
``TerminalEpisode``; ``docs/task-folders.md`` describes the format and the limits.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import os
import time
from collections.abc import Callable, Iterable
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from envlab.core import EnvSpec, Limits, NotFoundError, Task, TaskSet
from envlab.core.errors import ConfigError, EnvlabError
from envlab.core.spec import canonical_json
from envlab.envs.taskfolder.episode import TerminalEpisode
from envlab.envs.taskfolder.model import TaskFolder, find_task_folders
from envlab.sandbox import BackendName, backend

prep_log = logging.getLogger("envlab.prepare")

MAX_STEPS = 100
"""Steps (model turns) of one episode: a guard against an agent in a loop; time is bounded by
the task's own ``[agent] timeout_sec``."""
SETUP_MARGIN_S = 60.0
"""Added to the build timeout for ``reset`` (copying the workspace into a new sandbox) and to
the verifier's timeout for the grade (killing the agent's processes, scrubbing the workspace,
the verifier's sandbox on bounded storage)."""


def default_images() -> Literal["auto", "off"]:
    value = os.environ.get("ENVLAB_IMAGES", "auto")
    if value not in ("auto", "off"):
        raise ConfigError(f"ENVLAB_IMAGES={value!r}: use 'auto' or 'off'")
    return value  # type: ignore[return-value]


class TerminalConfig(BaseModel):
    """The config of a ``TerminalEnv``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: Path
    """A task folder, or a directory of task folders."""
    sandbox: BackendName = "bwrap"
    """The agent's sandbox backend. Only an isolating backend is accepted: the grade is only
    valid if the agent could not reach the tests, the reward file or the verifier."""
    run_timeout: float = Field(120.0, gt=0, allow_inf_nan=False)
    """Seconds one ``run`` command may take at most, whatever the agent asks."""
    images: Literal["auto", "off"] = Field(default_factory=lambda: default_images())
    """``auto``: a task whose Dockerfile starts ``FROM`` a family envlab can build runs in that
    image (``envs/taskfolder/image_build.py``); the others, and every task with ``off``, run
    in the host-filesystem mode. Default: ``ENVLAB_IMAGES`` (``auto`` when unset)."""
    verifier_mode: Literal["task", "separate", "shared"] = "task"
    """Harbor's verifier mode of an image task: ``task`` as its ``task.toml`` says (``separate``
    unless it declares ``[verifier] environment_mode = "shared"``), or forced for every task
    (``envlab task check`` tries ``shared`` where the oracle fails ``separate``)."""

    @field_validator("path")
    @classmethod
    def _absolute(cls, v: Path) -> Path:
        return v.resolve()

    @field_validator("sandbox")
    @classmethod
    def _isolating(cls, v: str) -> str:
        if not backend(v).isolated:
            raise ValueError(
                f"task folders cannot run on the {v!r} sandbox backend: it does not isolate "
                "the agent from the host, so the agent could rewrite the tests, the reward "
                "file or a process of the verifier, and no grade would be valid. Use 'bwrap'"
            )
        return v


class TerminalEnv(EnvSpec):
    """Task folders (the Harbor format) as an environment: ``TerminalEnv("tasks/")``.

    ``name`` is ``taskfolder:<directory name>``; the hash does not depend on where the folders
    are on disk, only on their files (and the code and the rest of the config).
    """

    id: ClassVar[str] = "taskfolder"
    description: ClassVar[str] = "Harbor-style task folders in a bubblewrap sandbox"
    version: ClassVar[str] = "2"
    Config = TerminalConfig
    environment = TerminalEpisode
    config: TerminalConfig

    def __init__(
        self,
        path: str | Path | None = None,
        /,
        config: BaseModel | dict[str, Any] | None = None,
        **values: Any,
    ) -> None:
        if path is not None:
            values["path"] = path
        super().__init__(config, **values)
        self._folders = {f.name: f for f in find_task_folders(self.config.path)}

    @property
    def name(self) -> str:
        config = getattr(self, "config", None)
        return f"{self.id}:{config.path.name}" if config is not None else self.id

    @property
    def path(self) -> Path:
        return self.config.path

    def folder(self, task_id: str) -> TaskFolder:
        """The parsed task folder of ``task_id``."""
        try:
            return self._folders[task_id]
        except KeyError:
            raise NotFoundError(
                f"task {task_id!r} is not in {self.path}; its tasks: "
                f"{', '.join(sorted(self._folders))}"
            ) from None

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        tasks = [_task(f) for f in self._folders.values() if f.config.split == split]
        if not tasks:
            splits = sorted({f.config.split for f in self._folders.values()})
            raise ConfigError(f"no task in {self.path} has split {split!r}; splits: {splits}")
        return TaskSet(tasks, seed=seed, name=self.path.name).head(n)

    def limits(self, task: Task) -> Limits:
        """Harbor's meaning of ``task.toml``: ``[agent] timeout_sec`` is the agent's time for
        the episode, ``[verifier] timeout_sec`` bounds the grade, ``build_timeout_sec`` the
        reset (plus ``SETUP_MARGIN_S`` each for setting up sandboxes). No limit per step:
        every command has its own timeout (``run_timeout``, the solution's the agent's)."""
        cfg = self.folder(task.id).config
        return Limits(
            max_steps=MAX_STEPS,
            step_timeout_s=None,
            episode_timeout_s=cfg.agent.timeout_sec,
            reset_timeout_s=cfg.environment.build_timeout_sec + SETUP_MARGIN_S,
            grade_timeout_s=cfg.verifier.timeout_sec + SETUP_MARGIN_S,
        )

    async def prepare(self, tasks: Iterable[Task]) -> None:
        """Each task's runtime before any episode: its image (the base too, once per machine)
        and verifier caches, or its host workspace, and a shared task's calibration; each
        layer's progress and each task's outcome on the ``envlab.prepare`` logger. A task that
        cannot be prepared is left for its episodes to report (``env_error``/``infra_error``)."""
        from envlab.sandbox.tasks.runtime import prepare_runtime

        cfg = self.config
        todo = list(tasks)
        for i, task in enumerate(todo, 1):
            folder = self.folder(task.id)
            t0 = time.monotonic()
            try:
                runtime = await prepare_runtime(
                    folder, images=cfg.images, verifier_mode=cfg.verifier_mode,
                    backend=cfg.sandbox, progress=_layer_progress(folder.name),
                )  # fmt: skip
            except EnvlabError as e:
                prep_log.warning("[%d/%d] %s: not prepared (%s)", i, len(todo), folder.name, e)
                continue
            took = time.monotonic() - t0
            prep_log.info("[%d/%d] %s: %s, %s verifier (%.1fs)", i, len(todo), folder.name,
                          runtime.mode, runtime.verifier_mode, took)  # fmt: skip

    def content_hash(self) -> str:
        """The code (this package's modules and the verifier's kit, and the classes of
        ``code()``), the config but its path, the name and each task folder's files."""
        h = hashlib.sha256(_package_digest().encode())
        for cls in self.code():
            for klass in cls.__mro__:
                if klass is object or klass.__module__.startswith((__package__, "abc")):
                    continue  # the package digest has this package's code
                try:
                    h.update(inspect.getsource(klass).encode())
                except (OSError, TypeError):
                    h.update(f"{klass.__module__}.{klass.__qualname__}".encode())
        config = self.config.model_dump(mode="json", exclude={"path"})
        h.update(canonical_json(config, f"{self.name} config") + self.name.encode())
        for name, folder in sorted(self._folders.items()):
            h.update(f"\0{name}\0{folder.content_hash()}".encode())
        return h.hexdigest()[:16]


def _task(f: TaskFolder) -> Task:
    cfg = f.config
    return Task(
        id=f.name,
        prompt=f.instruction,
        answer=str(f.solution) if f.solution else None,
        split=cfg.split,
        metadata={
            **cfg.metadata,
            **{k: v for k, v in cfg.task.items() if isinstance(v, str | int | float)},
            "path": str(f.path),
            "network_mode": cfg.network_mode_for("agent"),
        },
    )


@cache
def _package_digest() -> str:
    """sha256 of the sources of this package, of the verifier's kit and of the image runtime
    (once per process): what grades a task is part of what its results mean."""
    h = hashlib.sha256()
    grading = ("envlab.sandbox.verifier_kit", "envlab.sandbox.image")
    for where in (files(__package__), *(files(p) for p in grading)):
        for entry in sorted(where.iterdir(), key=lambda e: e.name):
            if entry.is_file() and entry.name.endswith((".py", ".sh")):
                h.update(f"{entry.name}\0".encode() + entry.read_bytes())
    return h.hexdigest()


def _layer_progress(task: str) -> Callable[[str, bool, float], None]:
    def progress(what: str, cached: bool, seconds: float) -> None:
        if not cached:
            prep_log.info("  %s: built %s (%.1fs)", task, what, seconds)

    return progress


def load_task_env(path: str | Path, **config: Any) -> TerminalEnv:
    """The spec of a task folder, or of a directory of task folders (``config``: the fields
    of ``TerminalConfig`` but the path, e.g. ``run_timeout``)."""
    return TerminalEnv(path, **config)
