"""Build a task's ``environment/Dockerfile`` into an image, without Docker.

Each stage starts from a base root filesystem (``sandbox.image.bases``) or an earlier stage;
each ``RUN``, ``COPY``/``ADD`` and ``WORKDIR`` becomes a layer, cached under the hash of its
parent layer and of what it does (for ``COPY``: the contents copied). ``RUN`` runs as the
image's root (or ``USER``) over the layers below, with the host's network during the build
only (``RUN --network=none`` without), and fails the build, naming its line, when its command
exits non-zero; a second build of an unchanged Dockerfile finds every layer and runs nothing.
The steps are done by the walk and executor the host mode uses too (``build_steps``); where
each lands, a new layer or none when the cache has it, is this module's ``_Layers``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shlex
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from envlab.core.errors import ConfigError
from envlab.sandbox.image.bases import ensure_base, recipe_for
from envlab.sandbox.image.runner import DEFAULT_PATH
from envlab.sandbox.image.sandbox import ImageSandbox
from envlab.sandbox.image.store import (
    META,
    Image,
    ImageConfig,
    LayerMeta,
    alocked,
    commit,
    content_key,
    images_root,
    remove_tree,
    scratch,
    tree_bytes,
)
from envlab.sandbox.limits import Limits
from envlab.sandbox.tasks.build_steps import Steps, ignored, matches, walk
from envlab.sandbox.tasks.dockerfile import (
    Copy,
    DockerfileError,
    Run,
    Stage,
    Step,
    Workdir,
    parse_stages,
)
from envlab.sandbox.tasks.source import TaskSource

BUILDER_VERSION = "2"
Progress = Callable[[str, bool, float], None]
"""``(what, cached, seconds)`` for each layer as it is found or built."""


def _quiet(_what: str, _cached: bool, _s: float) -> None:
    pass


async def build_image(task: TaskSource, *, progress: Progress = _quiet) -> Image:
    """The image of ``task``'s Dockerfile (every layer built or found in the cache)."""
    dockerfile, prebuilt = task.dockerfile, task.config.environment.docker_image
    if dockerfile is None and not prebuilt:
        raise DockerfileError(f"task {task.name} has no environment/Dockerfile to build")
    text = dockerfile.read_text() if dockerfile is not None else f"FROM {prebuilt}\n"
    source = f"{task.name}/environment/Dockerfile"
    stages = parse_stages(text, source=source, base_config=_base_config)
    memory = (task.config.environment.memory_mb or 4096) << 20
    builder = _Builder(task, source, progress, memory)
    built: dict[int, Image] = {}
    for stage in stages:
        if stage.index in _needed(stages):
            built[stage.index] = await builder.stage(stage, built)
    return built[stages[-1].index]


def _base_config(ref: str) -> ImageConfig:
    """What a base image starts with: its ``WORKDIR``, and the ``PATH`` Docker's images set."""
    try:
        workdir = recipe_for(ref).workdir
    except ConfigError:
        workdir = "/"
    return ImageConfig(workdir=workdir, env={"PATH": DEFAULT_PATH})


def _needed(stages: list[Stage]) -> set[int]:
    """Indexes of the stages the last one depends on (FROM and COPY --from), itself included."""
    names = {s.name: s.index for s in stages if s.name} | {str(s.index): s.index for s in stages}
    want, todo = set(), [stages[-1].index]
    while todo:
        i = todo.pop()
        if i in want:
            continue
        want.add(i)
        s = stages[i]
        if s.base_stage is not None:
            todo.append(s.base_stage)
        todo += [names[c.from_stage] for c in s.steps
                 if isinstance(c, Copy) and c.from_stage in names]  # fmt: skip
    return want


class _Builder:
    def __init__(self, task: TaskSource, source: str, progress: Progress, memory: int) -> None:
        self.task, self.source, self.progress, self.memory = task, source, progress, memory
        self.steps = Steps(task, source, read_from=self._read_from)
        self.stages: dict[int, Image] = {}
        self.names: dict[str, int] = {}

    async def stage(self, stage: Stage, built: dict[int, Image]) -> Image:
        self.stages = built
        if stage.name:
            self.names[stage.name] = stage.index
        self.names[str(stage.index)] = stage.index
        if stage.base_stage is not None:
            parent = built[stage.base_stage]
            image = parent.model_copy(deep=True)
        else:
            t0 = time.monotonic()
            base = await asyncio.to_thread(ensure_base, stage.base, self._base_progress)
            # a base is built once per machine, not by this task: not on its build clock
            self.steps.deadline += time.monotonic() - t0
            env = {**stage.config.env, **dict(base.recipe.env)}
            image = Image(ref=stage.base, base=base.rootfs, notes=list(base.notes))
            image.key = content_key(BUILDER_VERSION, str(base.rootfs))
            image.config.env = env
        layers = _Layers(self, image)
        await walk(stage.steps, layers, self.steps)
        image = layers.image
        config = stage.config.model_copy(deep=True)
        config.env = {**image.config.env, **stage.config.env}
        image.config = config
        image.notes += stage.notes
        return image

    def _base_progress(self, what: str) -> None:
        self.progress(what, False, 0.0)

    async def _read_from(self, step: Copy, paths: tuple[str, ...]) -> list[bytes]:
        """``COPY --from``: each path of the stage or image, as a tar archive."""
        box = await ImageSandbox.create(
            image=await self._source_image(step),
            name="copy-from",
            limits=Limits(memory_bytes=self.memory),
        )
        out = []
        try:
            for p in paths:
                q = shlex.quote(p)
                script = (
                    f"if [ -d {q} ]; then tar -c -f - -C {q} .; else "
                    f'tar -c -f - -C "$(dirname -- {q})" "$(basename -- {q})"; fi'
                )
                data, res = await box.exec_bytes(
                    ["sh", "-c", script], max_output=4 << 30, timeout=600
                )
                if res.exit_code != 0:
                    raise DockerfileError(
                        f"{self.source}:{step.line}: COPY --from={step.from_stage}: cannot read "
                        f"{p}: {res.stderr[-500:]}"
                    )
                out.append(data)
        finally:
            await box.close()
        return out

    async def _source_image(self, step: Copy) -> Image:
        name = step.from_stage or ""
        if name in self.names and self.names[name] in self.stages:
            return self.stages[self.names[name]]
        base = await asyncio.to_thread(ensure_base, name, self._base_progress)
        return Image(ref=name, base=base.rootfs)

    def fingerprint(self, step: Step) -> list[object]:
        if not isinstance(step, Copy):
            return [BUILDER_VERSION, type(step).__name__, repr(step)]
        context = [] if step.from_stage else self._context_hash(step.sources)
        source = step.from_stage
        if source in self.names and self.names[source] in self.stages:
            source = self.stages[self.names[source]].key
        return [BUILDER_VERSION, "COPY", repr(step), source, context]

    def _context_hash(self, patterns: tuple[str, ...]) -> str:
        h = hashlib.sha256()
        root = self.task.environment_dir
        for pattern in patterns:
            for p in matches(root, pattern):
                for f in [p, *sorted(p.rglob("*"))] if p.is_dir() else [p]:
                    rel = f.relative_to(root).as_posix()
                    if ignored(rel, self.steps.ignore):
                        continue
                    st = f.lstat()
                    h.update(f"{rel}\0{st.st_mode:o}\0".encode())
                    if f.is_symlink():
                        h.update(os.readlink(f).encode())
                    elif f.is_file():
                        h.update(hashlib.sha256(f.read_bytes()).digest())
            h.update(pattern.encode())
        return h.hexdigest()


class _Layers:
    """Where the image mode's steps land: each a new layer over the image so far, cached under
    the hash of its parent and of what the step does."""

    def __init__(self, builder: _Builder, image: Image) -> None:
        self.builder, self.image = builder, image

    @contextlib.asynccontextmanager
    async def open(self, step: Step) -> AsyncIterator[ImageSandbox | None]:
        """A sandbox over a new layer for ``step`` (committed when the step is done), or None
        when the cache has that layer; either way the image goes on from that layer."""
        b = self.builder
        key = content_key(self.image.key, await asyncio.to_thread(b.fingerprint, step))
        final = images_root() / "layers" / key
        what = f"{b.source}:{step.line}: {step.text[:100]}"
        async with contextlib.AsyncExitStack() as stack:
            box = None
            if not (final / META).exists():
                await stack.enter_async_context(alocked(key))
                if not (final / META).exists():
                    box = await stack.enter_async_context(self._new_layer(step, key, final, what))
            if box is None:
                b.progress(what, True, 0.0)
            yield box
        out = self.image.model_copy(deep=True)
        out.layers.append(final / "upper")
        out.key = key
        if isinstance(step, Workdir):
            out.config.workdir = step.path
        self.image = out

    @contextlib.asynccontextmanager
    async def _new_layer(
        self, step: Step, key: str, final: Path, what: str
    ) -> AsyncIterator[ImageSandbox]:
        b = self.builder
        tmp = await asyncio.to_thread(scratch, "layer")
        (tmp / "upper").mkdir()
        (tmp / "work").mkdir()
        t0 = time.monotonic()
        try:
            box = await ImageSandbox.create(
                image=self.image,
                upper=(tmp / "upper", tmp / "work"),
                network=isinstance(step, Run) and step.network,
                user=step.user if isinstance(step, Run) else "root",
                limits=Limits(memory_bytes=b.memory, timeout_s=b.steps.left()),
                name="build",
            )
            try:
                yield box
            finally:
                await box.close()
            took = time.monotonic() - t0
            size = await asyncio.to_thread(tree_bytes, tmp / "upper")
            meta = LayerMeta(key=key, instruction=what, seconds=took, bytes=size)
            await asyncio.to_thread(remove_tree, tmp / "work")
            (tmp / META).write_text(meta.model_dump_json(indent=1))
        except BaseException:
            await asyncio.to_thread(remove_tree, tmp)
            raise
        await asyncio.to_thread(commit, tmp, final)
        b.progress(what, False, took)
