"""Doing a Dockerfile's steps in a sandbox: the one walk and the one step executor of both
builders.

``walk`` takes the parsed steps in order. A ``Landing`` says where each step's effect lands:
the host mode's is the workspace being built (one sandbox over it for every step), the image
mode's a new cached layer (a sandbox per layer, or none when the layer is in the cache).
``Steps`` does a step in the sandbox it is given: ``RUN`` as its command, ``WORKDIR`` as a
``mkdir``, ``COPY``/``ADD`` as tar archives (of the build context, heredocs, URLs or another
stage's files) that the sandbox's own ``tar`` unpacks.
"""

from __future__ import annotations

import asyncio
import fnmatch
import io
import shlex
import tarfile
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from envlab.sandbox.base import Sandbox
from envlab.sandbox.tasks.dockerfile import Copy, DockerfileError, Run, Step, Workdir
from envlab.sandbox.tasks.source import TaskSource

ReadFrom = Callable[[Copy, tuple[str, ...]], Awaitable[list[bytes]]]
"""``COPY --from``: the tar archive of each path, in the stage or image the step names."""


class Landing(Protocol):
    def open(self, step: Step) -> AbstractAsyncContextManager[Sandbox | None]:
        """The sandbox whose filesystem ``step`` changes, or None when its effect is there
        already (a cached layer)."""
        ...


async def walk(steps: Iterable[Step], landing: Landing, executor: Steps) -> None:
    """Do ``steps`` in order, each where ``landing`` puts it."""
    for step in steps:
        async with landing.open(step) as box:
            if box is not None:
                await executor.execute(box, step)


class Steps:
    """Does one step of ``task``'s build in a sandbox; errors name ``source`` and the line.
    ``hint`` ends the message of a failing ``RUN``; ``read_from`` serves ``COPY --from``."""

    def __init__(
        self, task: TaskSource, source: str, *, hint: str = "", read_from: ReadFrom | None = None
    ) -> None:
        self.task, self.source, self.hint, self.read_from = task, source, hint, read_from
        self.deadline = time.monotonic() + task.config.environment.build_timeout_sec
        self.ignore = _dockerignore(task.environment_dir)

    def where(self, line: int) -> str:
        return f"{self.source}:{line}" if line else self.source

    def left(self) -> float:
        """Seconds left of ``[environment] build_timeout_sec``; an error when none are."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise DockerfileError(
                f"{self.source}: the build took longer than [environment] build_timeout_sec = "
                f"{self.task.config.environment.build_timeout_sec}"
            )
        return left

    async def execute(self, box: Sandbox, step: Step) -> None:
        timeout = self.left()
        if isinstance(step, Run):
            await self._run(box, step, timeout)
        elif isinstance(step, Workdir):
            failed = f"{self.where(step.line)}: `{step.text}` failed"
            await _sh(box, failed, f"mkdir -p -- {shlex.quote(step.path)}", b"", timeout)
        else:
            failed = f"{self.where(step.line)}: copying into {step.dest} failed"
            for archive, script in await self._archives(step):
                paths = _copied(archive, script, step.dest)  # only what this COPY wrote
                if step.chmod is not None and paths:
                    script += f" && chmod {step.chmod:o} -- {paths}"
                if step.chown and paths:
                    script += f" && chown -h {shlex.quote(step.chown)} -- {paths}"
                await _sh(box, failed, script, archive, timeout)

    async def _run(self, box: Sandbox, step: Run, timeout: float) -> None:
        res = await box.exec(list(step.argv), cwd=step.workdir, env=dict(step.env), timeout=timeout)
        if res.ok:
            return
        why = "timed out" if res.timed_out else f"exited with code {res.exit_code}"
        # the end of each stream, stderr last: where a failing command says why
        tail = (res.stdout.strip()[-800:] + "\n" + res.stderr.strip()[-1600:]).strip()
        hint = f"\n{self.hint}" if self.hint else ""
        raise DockerfileError(f"{self.where(step.line)}: `{step.text[:200]}` {why}:\n{tail}{hint}")

    async def _archives(self, step: Copy) -> list[tuple[bytes, str]]:
        """Each archive ``step`` copies, with the script that unpacks it where it belongs."""
        out: list[tuple[bytes, str]] = []
        if step.inline:
            files = [(n, body.encode(), 0o644) for n, body in step.inline]
            one = len(files) == 1 and not step.sources
            out.append((_tar(files), _single(step.dest, files[0][0]) if one else _into(step.dest)))
        for url in (s for s in step.sources if "://" in s):
            name, data = await asyncio.to_thread(_fetch, url)
            out.append((_tar([(name, data, 0o600)]), _single(step.dest, name)))
        local = tuple(s for s in step.sources if "://" not in s)
        if local and step.from_stage is not None:
            if self.read_from is None:
                raise DockerfileError(f"{self.where(step.line)}: COPY --from is not supported")
            single = len(local) == 1 and not local[0].endswith("/")
            script = _single(step.dest, None) if single else _into(step.dest)
            out += [(data, script) for data in await self.read_from(step, local)]
        elif local:
            context, where = self.task.environment_dir, self.where(step.line)
            copy = replace(step, sources=local)
            out.append(await asyncio.to_thread(_copy_archive, context, copy, self.ignore, where))
        return out


async def _sh(box: Sandbox, failed: str, script: str, stdin: bytes, timeout: float) -> None:
    _, res = await box.exec_bytes(["sh", "-c", script], stdin=stdin or None, timeout=timeout)
    if res.exit_code != 0:
        raise DockerfileError(f"{failed}: {res.stderr[-1500:]}")


def _dockerignore(context: Path) -> list[str]:
    f = context / ".dockerignore"
    if not f.is_file():
        return []
    lines = [ln.strip() for ln in f.read_text().splitlines()]
    return [ln.rstrip("/") for ln in lines if ln and not ln.startswith(("#", "!"))]


def ignored(rel: str, patterns: list[str]) -> bool:
    """Whether the context path ``rel`` is left out by ``patterns`` (``.dockerignore``'s)."""
    return any(fnmatch.fnmatch(rel, p) or rel.startswith(p + "/") for p in patterns)


def matches(context: Path, pattern: str) -> list[Path]:
    """The context paths a ``COPY`` source names (a glob, or one path such as ``.``)."""
    if "://" in pattern:
        return []
    hits = sorted(context.glob(pattern)) if any(c in pattern for c in "*?[") else [
        context / pattern
    ]  # fmt: skip
    root = context.resolve()
    return [h for h in hits if h.exists() and h.resolve().is_relative_to(root)]


def _copy_archive(context: Path, step: Copy, ignore: list[str], where: str) -> tuple[bytes, str]:
    """The tar archive of a ``COPY``'s sources in the context, and the script that unpacks it."""
    matched: list[Path] = []
    for pattern in step.sources:
        hits = matches(context, pattern)
        if not hits:
            raise DockerfileError(f"{where}: COPY source {pattern!r} not found in {context}")
        matched += hits
    buf = io.BytesIO()
    unpacked = False
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for src in matched:
            if step.extract and src.is_file() and tarfile.is_tarfile(src):
                _append_archive(tar, src)
                unpacked = True
            elif src.is_dir():
                for child in sorted(src.rglob("*")):
                    rel = child.relative_to(context).as_posix()
                    if not ignored(rel, [*ignore, *step.exclude]):
                        tar.add(child, arcname=child.relative_to(src).as_posix(), recursive=False)
            else:
                tar.add(src, arcname=src.name, recursive=False)
    if len(matched) == 1 and matched[0].is_file() and not unpacked:
        # Docker: a destination without a trailing slash is the file's new name, unless it is
        # an existing directory
        return buf.getvalue(), _single(step.dest, matched[0].name)
    return buf.getvalue(), _into(step.dest)


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


def _into(dest: str) -> str:
    """The script that unpacks an archive into the directory ``dest``."""
    d = shlex.quote(dest.rstrip("/") or "/")
    return f"mkdir -p -- {d} && tar -x --no-same-owner -f - -C {d}"


def _single(dest: str, name: str | None) -> str:
    """The script that unpacks a one-member archive (its member ``name``; None: whatever it
    is) as the file ``dest``, or into ``dest`` when that is a directory."""
    if dest.endswith("/"):
        return _into(dest)
    d, untar = shlex.quote(dest), "tar -x --no-same-owner -f -"
    member = f'"$t"/{shlex.quote(name)}' if name else '"$t"/*'
    return (
        f"if [ -d {d} ]; then {untar} -C {d}; else "
        f'mkdir -p -- "$(dirname -- {d})" && t=$(mktemp -d) && {untar} -C "$t" '
        f'&& mv -f -- {member} {d} && rmdir "$t"; fi'
    )


def _copied(archive: bytes, script: str, dest: str) -> str:
    """The quoted paths a copy's archive lands on: the destination itself when it is one file
    renamed, else each member under the destination directory."""
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        names = [m.name.removeprefix("./") for m in tar.getmembers()]
    names = [n for n in names if n not in ("", ".")]
    if "mv -f" in script and len(names) == 1:
        return shlex.quote(dest)
    base = dest.rstrip("/")
    return " ".join(shlex.quote(f"{base}/{n}") for n in names)


def _tar(files: list[tuple[str, bytes, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data, mode in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _fetch(url: str) -> tuple[str, bytes]:
    """``ADD URL``: the file's name (the URL's last part) and its bytes."""
    try:
        with urllib.request.urlopen(url, timeout=120) as r:
            data = r.read()
    except OSError as e:
        raise DockerfileError(f"ADD {url}: cannot fetch it at build time: {e}") from e
    return url.rstrip("/").rsplit("/", 1)[-1].split("?")[0] or "index.html", data
