"""Build a task's ``environment/Dockerfile`` into an image, without Docker.

Each stage starts from a base root filesystem (``sandbox.image.bases``) or an earlier stage;
each ``RUN``, ``COPY``/``ADD`` and ``WORKDIR`` becomes a layer, cached under the hash of its
parent layer and of what it does (for ``COPY``: the contents copied). ``RUN`` runs as the
image's root (or ``USER``) over the layers below, with the host's network during the build
only (``RUN --network=none`` without), and fails the build, naming its line, when its command
exits non-zero; a second build of an unchanged Dockerfile finds every layer and runs nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import shlex
import tarfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from envlab.core.errors import ConfigError
from envlab.sandbox.image.bases import ensure_base, recipe_for
from envlab.sandbox.image.sandbox import ImageSandbox
from envlab.sandbox.image.store import (
    META,
    Image,
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
from envlab.sandbox.tasks.dockerfile import DockerfileError
from envlab.sandbox.tasks.dockerfile_stages import (
    CopyStep,
    RunStep,
    Stage,
    Step,
    WorkdirStep,
    parse_stages,
)
from envlab.sandbox.tasks.host_build import _copy_archive, _dockerignore, _ignored
from envlab.sandbox.tasks.source import TaskSource

BUILDER_VERSION = "1"
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
    stages = parse_stages(text, source=source, base_workdir=_base_workdir)
    cfg = task.config.environment
    deadline = time.monotonic() + cfg.build_timeout_sec
    builder = _Builder(task, source, deadline, progress, (cfg.memory_mb or 4096) << 20)
    built: dict[int, Image] = {}
    for stage in stages:
        if stage.index in _needed(stages):
            built[stage.index] = await builder.stage(stage, built)
    return built[stages[-1].index]


def _base_workdir(ref: str) -> str:
    try:
        return recipe_for(ref).workdir
    except ConfigError:
        return "/"


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
                 if isinstance(c, CopyStep) and c.from_stage in names]  # fmt: skip
    return want


class _Builder:
    def __init__(
        self, task: TaskSource, source: str, deadline: float, progress: Progress, memory: int
    ) -> None:
        self.task, self.source, self.deadline, self.progress = task, source, deadline, progress
        self.memory = memory
        self.ignore = _dockerignore(task.environment_dir)
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
            base = await asyncio.to_thread(ensure_base, stage.base, self._base_progress)
            env = {**stage.config.env, **dict(base.recipe.env)}
            image = Image(ref=stage.base, base=base.rootfs, notes=list(base.notes))
            image.key = content_key(BUILDER_VERSION, str(base.rootfs))
            image.config.env = env
        for step in stage.steps:
            image = await self._layer(image, stage, step)
        config = stage.config.model_copy(deep=True)
        config.env = {**image.config.env, **stage.config.env}
        image.config = config
        image.notes += stage.notes
        return image

    def _base_progress(self, what: str) -> None:
        self.progress(what, False, 0.0)

    async def _layer(self, image: Image, stage: Stage, step: Step) -> Image:
        key = content_key(image.key, await asyncio.to_thread(self._fingerprint, step))
        final = images_root() / "layers" / key
        what = f"{self.source}:{step.line}: {step.text[:100]}"
        if not (final / META).exists():
            await self._build_layer(image, stage, step, key, final, what)
        else:
            self.progress(what, True, 0.0)
        out = image.model_copy(deep=True)
        out.layers.append(final / "upper")
        out.key = key
        if isinstance(step, WorkdirStep):
            out.config.workdir = step.path
        return out

    async def _build_layer(
        self, image: Image, stage: Stage, step: Step, key: str, final: Path, what: str
    ) -> None:
        async with alocked(key):
            if (final / META).exists():
                self.progress(what, True, 0.0)
                return
            tmp = await asyncio.to_thread(scratch, "layer")
            (tmp / "upper").mkdir()
            (tmp / "work").mkdir()
            t0 = time.monotonic()
            try:
                await self._execute(image, stage, step, (tmp / "upper", tmp / "work"))
                took = time.monotonic() - t0
                size = await asyncio.to_thread(tree_bytes, tmp / "upper")
                meta = LayerMeta(key=key, instruction=what, seconds=took, bytes=size)
                await asyncio.to_thread(remove_tree, tmp / "work")
                (tmp / META).write_text(meta.model_dump_json(indent=1))
            except BaseException:
                await asyncio.to_thread(remove_tree, tmp)
                raise
            await asyncio.to_thread(commit, tmp, final)
            self.progress(what, False, took)

    async def _execute(
        self, image: Image, stage: Stage, step: Step, upper: tuple[Path, Path]
    ) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise DockerfileError(
                f"{self.source}: the build took longer than [environment] build_timeout_sec = "
                f"{self.task.config.environment.build_timeout_sec}"
            )
        network = isinstance(step, RunStep) and step.network
        user = step.user if isinstance(step, RunStep) else "root"
        box = await ImageSandbox.create(
            image=image, upper=upper, network=network, user=user,
            limits=Limits(memory_bytes=self.memory, timeout_s=left), name="build",
        )  # fmt: skip
        try:
            if isinstance(step, RunStep):
                await self._run(box, step, left)
            elif isinstance(step, WorkdirStep):
                await self._sh(box, step.line, f"mkdir -p -- {shlex.quote(step.path)}")
            else:
                await self._copy(box, step)
        finally:
            await box.close()

    async def _run(self, box: ImageSandbox, step: RunStep, timeout: float) -> None:
        res = await box.exec(list(step.argv), cwd=step.workdir, env=dict(step.env), timeout=timeout)
        if res.ok:
            return
        why = "timed out" if res.timed_out else f"exited with code {res.exit_code}"
        # the end of each stream, stderr last: where a failing command says why
        tail = (res.stdout.strip()[-800:] + "\n" + res.stderr.strip()[-1600:]).strip()
        raise DockerfileError(f"{self.source}:{step.line}: `{step.text[:200]}` {why}:\n{tail}")

    async def _sh(self, box: ImageSandbox, line: int, script: str, stdin: bytes = b"") -> None:
        _, res = await box.exec_bytes(["sh", "-c", script], stdin=stdin or None, timeout=600)
        if res.exit_code != 0:
            raise DockerfileError(f"{self.source}:{line}: {res.stderr[-1500:]}")

    async def _copy(self, box: ImageSandbox, step: CopyStep) -> None:
        for archive, script in await self._archives(step):
            paths = _copied(archive, script, step.copy.dest)  # only what this COPY wrote
            if step.copy.chmod is not None and paths:
                script += f" && chmod {step.copy.chmod:o} -- {paths}"
            if step.chown and paths:
                script += f" && chown -h {shlex.quote(step.chown)} -- {paths}"
            await self._sh(box, step.line, script, archive)

    async def _archives(self, step: CopyStep) -> list[tuple[bytes, str]]:
        c = step.copy
        d = shlex.quote(c.dest.rstrip("/") or "/")
        into = f"mkdir -p -- {d} && tar -x --no-same-owner -f - -C {d}"
        out: list[tuple[bytes, str]] = []
        if step.inline:
            files = [(n, body.encode(), 0o644) for n, body in step.inline]
            one = len(files) == 1 and not c.sources and not c.dest.endswith("/")
            out.append((_tar(files), _single(c.dest) if one else into))
        urls = [s for s in c.sources if "://" in s]
        if urls:
            out += [(await asyncio.to_thread(_fetch, u, c.dest), _single(c.dest)) for u in urls]
        local = tuple(s for s in c.sources if "://" not in s)
        if not local:
            return out
        if step.from_stage is not None:
            return out + await self._from_stage(step, local, into)
        where = f"{self.source}:{step.line}"
        copy = type(c)(c.line, local, c.dest, c.extract, None, c.exclude)
        archive, script, _ = await asyncio.to_thread(
            _copy_archive, self.task, copy, self.ignore, where
        )
        return [*out, (archive, script)]

    async def _from_stage(
        self, step: CopyStep, paths: tuple[str, ...], into: str
    ) -> list[tuple[bytes, str]]:
        src = await self._source_image(step)
        box = await ImageSandbox.create(
            image=src, name="copy-from", limits=Limits(memory_bytes=self.memory)
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
                single = not step.copy.dest.endswith("/") and len(paths) == 1
                out.append(
                    (data, _single(step.copy.dest) if single and not p.endswith("/") else into)
                )
        finally:
            await box.close()
        return out

    async def _source_image(self, step: CopyStep) -> Image:
        name = step.from_stage or ""
        if name in self.names and self.names[name] in self.stages:
            return self.stages[self.names[name]]
        base = await asyncio.to_thread(ensure_base, name, self._base_progress)
        return Image(ref=name, base=base.rootfs)

    def _fingerprint(self, step: Step) -> list[object]:
        if isinstance(step, CopyStep):
            context = [] if step.from_stage else self._context_hash(step.copy.sources)
            source = step.from_stage
            if source in self.names and self.names[source] in self.stages:
                source = self.stages[self.names[source]].key
            return [
                BUILDER_VERSION,
                "COPY",
                repr(step.copy),
                step.inline,
                step.chown,
                source,
                context,
            ]
        return [BUILDER_VERSION, type(step).__name__, repr(step)]

    def _context_hash(self, patterns: tuple[str, ...]) -> str:
        h = hashlib.sha256()
        root = self.task.environment_dir
        for pattern in patterns:
            for p in _matches(root, pattern):
                for f in [p, *sorted(p.rglob("*"))] if p.is_dir() else [p]:
                    rel = f.relative_to(root).as_posix()
                    if _ignored(rel, self.ignore):
                        continue
                    st = f.lstat()
                    h.update(f"{rel}\0{st.st_mode:o}\0".encode())
                    if f.is_symlink():
                        h.update(os.readlink(f).encode())
                    elif f.is_file():
                        h.update(hashlib.sha256(f.read_bytes()).digest())
            h.update(pattern.encode())
        return h.hexdigest()


def _copied(archive: bytes, script: str, dest: str) -> str:
    """The quoted paths a copy's archive lands on: the destination itself when it is one file
    renamed, else each member under the destination directory."""
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        names = [m.name.lstrip("./") for m in tar.getmembers() if m.name not in (".", "./")]
    if "mv -f" in script and len(names) == 1:
        return shlex.quote(dest)
    base = dest.rstrip("/") or ""
    return " ".join(shlex.quote(f"{base}/{n}") for n in names)


def _matches(root: Path, pattern: str) -> list[Path]:
    """The context paths a ``COPY`` source names (a glob, or one path such as ``.``)."""
    if "://" in pattern:
        return []
    if any(c in pattern for c in "*?["):
        return sorted(root.glob(pattern))
    path = root / pattern
    return [path] if path.exists() else []


def _single(dest: str) -> str:
    d = shlex.quote(dest.rstrip("/") or "/")
    if dest.endswith("/"):
        return f"mkdir -p -- {d} && tar -x --no-same-owner -f - -C {d}"
    untar = "tar -x --no-same-owner -f -"
    return (
        f"if [ -d {d} ]; then {untar} -C {d}; else "
        f'mkdir -p -- "$(dirname -- {d})" && t=$(mktemp -d) && {untar} -C "$t" '
        f'&& mv -f -- "$t"/* {d} && rmdir "$t"; fi'
    )


def _tar(files: list[tuple[str, bytes, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data, mode in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _fetch(url: str, dest: str) -> bytes:
    """``ADD URL``: the file, as a one-member archive named after the URL's last part."""
    try:
        with urllib.request.urlopen(url, timeout=120) as r:
            data = r.read()
    except OSError as e:
        raise DockerfileError(f"ADD {url}: cannot fetch it at build time: {e}") from e
    name = url.rstrip("/").rsplit("/", 1)[-1].split("?")[0] or "index.html"
    return _tar([(name, data, 0o600)])
