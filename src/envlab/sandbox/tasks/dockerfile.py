"""The subset of a Dockerfile that a sandbox over the host's root can honour.

Honoured: ``WORKDIR`` (under ``/app``), ``COPY``/``ADD`` of files from the build context,
``ENV``, ``ARG``, ``RUN`` (run in the sandbox at build time), ``SHELL``. Recorded and ignored:
``FROM`` (there is no image: commands see the host's system, read-only; a warning says so),
``LABEL``, ``MAINTAINER``, ``EXPOSE``, ``CMD``, ``ENTRYPOINT``, ``HEALTHCHECK``, ``STOPSIGNAL``,
``VOLUME``, ``USER root``. Anything else is an error that names the line.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from envlab.core.errors import ConfigError

APP = "/app"
IGNORED = {"LABEL", "MAINTAINER", "EXPOSE", "CMD", "ENTRYPOINT", "HEALTHCHECK", "STOPSIGNAL"}


class DockerfileError(ConfigError):
    """An instruction the sandbox cannot honour; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class Copy:
    line: int
    sources: tuple[str, ...]
    """Paths or glob patterns relative to the build context."""
    dest: str
    """Absolute, under /app; ends with / when it must be a directory."""
    extract: bool = False
    """ADD: unpack local tar archives, as Docker does."""
    chmod: int | None = None
    exclude: tuple[str, ...] = ()
    """Patterns of the context left out, on top of ``.dockerignore``."""


@dataclass(frozen=True, slots=True)
class Run:
    line: int
    argv: tuple[str, ...]
    workdir: str
    env: tuple[tuple[str, str], ...]
    text: str


@dataclass(slots=True)
class BuildPlan:
    """What to do, in order, and the state the workspace is left in."""

    steps: list[Copy | Run] = field(default_factory=list)
    workdir: str = APP
    env: dict[str, str] = field(default_factory=dict)
    base_image: str | None = None
    notes: list[str] = field(default_factory=list)


_VAR = re.compile(r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:?[-+])?(?P<word>[^}]*)\}|"
                  r"(?P<plain>[A-Za-z_][A-Za-z0-9_]*))")  # fmt: skip


def substitute(text: str, values: dict[str, str]) -> str:
    """Docker's ``$VAR``, ``${VAR}``, ``${VAR:-default}`` and ``${VAR:+alt}``."""

    def repl(m: re.Match[str]) -> str:
        name = m.group("braced") or m.group("plain")
        value = values.get(name)
        op = m.group("op")
        if op and op.endswith("-"):
            return value if value else m.group("word")
        if op and op.endswith("+"):
            return m.group("word") if value else ""
        return value or ""

    return _VAR.sub(repl, text.replace("\\$", "\0")).replace("\0", "$")


def logical_lines(text: str) -> list[tuple[int, str]]:
    """``(first line number, instruction)`` with continuations joined and comments dropped."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    for i, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not buf):
            continue
        if not buf:
            start = i
        if raw.rstrip().endswith("\\"):
            buf.append(raw.rstrip()[:-1])
            continue
        buf.append(raw)
        out.append((start, " ".join(s.strip() for s in buf if s.strip())))
        buf = []
    if buf:
        out.append((start, " ".join(s.strip() for s in buf if s.strip())))
    return out


def _json_list(rest: str) -> list[str] | None:
    if not rest.startswith("["):
        return None
    try:
        value = json.loads(rest)
    except json.JSONDecodeError:
        return None
    return [str(v) for v in value] if isinstance(value, list) else None


def absolute(path: str, workdir: str) -> str:
    """``path`` made absolute against ``workdir``, with ``.`` and ``..`` resolved."""
    p = PurePosixPath(path if path.startswith("/") else f"{workdir}/{path}")
    parts: list[str] = []
    for part in p.parts[1:]:
        if part == "..":
            if parts:
                parts.pop()
        elif part != ".":
            parts.append(part)
    return "/" + "/".join(parts)


def _inside_app(path: str) -> bool:
    return path == APP or path.startswith(APP + "/")


def parse_dockerfile(text: str, *, source: str = "Dockerfile") -> BuildPlan:
    plan = BuildPlan()
    args: dict[str, str] = {}
    shell = ["/bin/sh", "-c"]
    froms = 0

    def fail(line: int, instr: str, why: str) -> DockerfileError:
        return DockerfileError(f"{source}:{line}: `{instr}`: {why}")

    for line, instr in logical_lines(text):
        keyword, _, rest = instr.partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        values = {**args, **plan.env}
        if "<<" in rest and keyword in ("RUN", "COPY", "ADD"):
            raise fail(line, instr, "heredocs are not supported; put the script in a file")
        if keyword == "FROM":
            froms += 1
            if froms > 1:
                raise fail(line, instr, "multi-stage builds are not supported (one FROM only)")
            plan.base_image = rest.split()[0] if rest else None
            plan.notes.append(
                f"{source}:{line}: FROM {plan.base_image} is not met: there is no image; "
                "commands run on the host's system directories, read-only"
            )
        elif keyword == "WORKDIR":
            wd = absolute(substitute(rest, values), plan.workdir)
            if not _inside_app(wd):
                raise fail(
                    line, instr, f"the workspace is {APP}: use WORKDIR {APP} or a directory below"
                )
            plan.workdir = wd
            plan.steps.append(Run(line, ("mkdir", "-p", wd), APP, (), f"WORKDIR {wd}"))
        elif keyword in ("ENV", "ARG"):
            pairs = _env_pairs(rest, keyword, values)
            if pairs is None:
                raise fail(line, instr, f"cannot parse {keyword}; write {keyword} NAME=value")
            target = plan.env if keyword == "ENV" else args
            for k, v in pairs:
                if keyword == "ARG" and v is None:
                    target.setdefault(k, "")
                else:
                    target[k] = v or ""
        elif keyword in ("COPY", "ADD"):
            plan.steps.append(_copy(line, instr, keyword, rest, plan.workdir, values, fail))
        elif keyword == "RUN":
            if rest.startswith("--"):
                raise fail(line, instr, "RUN flags (--mount, --network, ...) are not supported")
            exec_form = _json_list(rest)
            argv = exec_form if exec_form is not None else [*shell, rest]
            env = tuple({**args, **plan.env}.items())
            plan.steps.append(Run(line, tuple(argv), plan.workdir, env, rest))
        elif keyword == "SHELL":
            form = _json_list(rest)
            if not form:
                raise fail(line, instr, 'SHELL takes a JSON list, e.g. SHELL ["/bin/bash", "-c"]')
            shell = form
        elif keyword == "USER":
            if substitute(rest, values).strip() not in ("root", "0", "0:0", "root:root"):
                raise fail(
                    line,
                    instr,
                    "switching users is not supported: every command runs as the sandbox's "
                    "own unprivileged user",
                )
            plan.notes.append(f"{source}:{line}: USER root ignored (the sandbox user is used)")
        elif keyword in IGNORED or keyword == "VOLUME":
            plan.notes.append(f"{source}:{line}: {keyword} ignored")
        else:
            raise fail(line, instr, f"{keyword} is not supported by the sandbox builder")
    return plan


def _env_pairs(
    rest: str, keyword: str, values: dict[str, str]
) -> list[tuple[str, str | None]] | None:
    try:
        words = shlex.split(rest)
    except ValueError:
        return None
    if not words:
        return None
    if "=" not in words[0]:
        if keyword == "ARG":
            return [(words[0], None)]
        # legacy form: ENV NAME value with spaces
        name, _, value = rest.partition(" ")
        return [(name, substitute(value.strip().strip('"'), values))]
    pairs: list[tuple[str, str | None]] = []
    for w in words:
        k, sep, v = w.partition("=")
        if not sep or not k:
            return None
        pairs.append((k, substitute(v, {**values, **{a: b or "" for a, b in pairs}})))
    return pairs


def _copy(
    line: int,
    instr: str,
    keyword: str,
    rest: str,
    workdir: str,
    values: dict[str, str],
    fail: Callable[[int, str, str], DockerfileError],
) -> Copy:
    chmod = None
    words = _json_list(rest)
    if words is None:
        try:
            words = shlex.split(rest)
        except ValueError:
            raise fail(line, instr, "cannot parse the arguments") from None
    while words and words[0].startswith("--"):
        flag, _, value = words.pop(0).partition("=")
        if flag == "--chmod":
            try:
                chmod = int(value, 8)
            except ValueError:
                raise fail(line, instr, f"--chmod={value} is not an octal mode") from None
        elif flag in ("--chown", "--link"):
            continue  # files belong to the sandbox user anyway
        else:
            raise fail(line, instr, f"{flag} is not supported (only local files can be copied)")
    if len(words) < 2:
        raise fail(line, instr, f"{keyword} needs at least one source and a destination")
    *sources, dest = (substitute(w, values) for w in words)
    for s in sources:
        if "://" in s:
            raise fail(line, instr, "URLs cannot be fetched at build time; vendor the file")
        if s.startswith("/") or ".." in PurePosixPath(s).parts:
            raise fail(line, instr, f"source {s!r} is outside the build context (environment/)")
    is_dir = dest.endswith(("/", "/.")) or dest == "." or len(sources) > 1
    target = absolute(dest, workdir) + ("/" if is_dir else "")
    if not _inside_app(target.rstrip("/") or "/"):
        raise fail(line, instr, f"destination {dest!r} is outside the workspace {APP}")
    return Copy(line, tuple(sources), target, extract=keyword == "ADD", chmod=chmod)
