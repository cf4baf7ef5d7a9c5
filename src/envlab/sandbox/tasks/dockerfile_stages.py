"""A Dockerfile read as Docker reads it, for building an image: stages, heredocs, every path.

``parse_stages`` gives one ``Stage`` per ``FROM`` with its steps (``RunStep``, ``CopyStep``,
``WorkdirStep``: each becomes a cached layer) and the config the stage leaves (``ENV``,
``WORKDIR``, ``USER``, ``SHELL``, ``EXPOSE``, ``CMD``, ``ENTRYPOINT``). ``ARG`` before the first
``FROM`` is global (usable in ``FROM``); after it, per stage. What cannot be honoured
(``ONBUILD``, ``RUN --mount=type=secret``, ``ADD`` of a git repository) is an error naming the
line. The host-filesystem mode keeps its own, narrower reading (``dockerfile``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from envlab.sandbox.image.runner import DEFAULT_PATH
from envlab.sandbox.image.store import ImageConfig
from envlab.sandbox.tasks.dockerfile import (
    Copy,
    DockerfileError,
    _env_pairs,
    _json_list,
    absolute,
    substitute,
)

_HEREDOC = re.compile(r"<<(-?)([\"']?)([A-Za-z_][A-Za-z0-9_]*)\2")
_RECORDED = {"LABEL", "MAINTAINER", "HEALTHCHECK", "STOPSIGNAL", "VOLUME"}


@dataclass(frozen=True)
class Instruction:
    line: int
    keyword: str
    rest: str
    heredocs: tuple[tuple[str, str], ...] = ()
    """``(name, body)`` of each heredoc the instruction opens, in order."""

    @property
    def text(self) -> str:
        return f"{self.keyword} {self.rest}".strip()


@dataclass(frozen=True)
class RunStep:
    line: int
    argv: tuple[str, ...]
    workdir: str
    env: tuple[tuple[str, str], ...]
    user: str
    text: str
    network: bool = True


@dataclass(frozen=True)
class CopyStep:
    line: int
    copy: Copy
    """Sources and destination (absolute); sources are in the context, or in ``from_stage``."""
    from_stage: str | None = None
    """A stage's name or index, or an image reference (``COPY --from``)."""
    inline: tuple[tuple[str, str], ...] = ()
    """Heredoc sources: ``(file name, content)``."""
    chown: str | None = None
    text: str = ""


@dataclass(frozen=True)
class WorkdirStep:
    line: int
    path: str
    text: str = ""


Step = RunStep | CopyStep | WorkdirStep


@dataclass
class Stage:
    index: int
    base: str
    """An image reference, or the name/index of an earlier stage."""
    name: str | None = None
    base_stage: int | None = None
    line: int = 0
    steps: list[Step] = field(default_factory=list)
    config: ImageConfig = field(default_factory=ImageConfig)
    args: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def instructions(text: str) -> list[Instruction]:
    """The Dockerfile's instructions: continuations joined, comments dropped, heredoc bodies
    taken off the lines that follow them."""
    lines = text.splitlines()
    out: list[Instruction] = []
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        if not stripped or stripped.startswith("#"):
            i += 1
            continue
        start, buf = i + 1, []
        while True:
            raw = lines[i]
            i += 1
            if raw.rstrip().endswith("\\") and i < len(lines):
                buf.append(raw.rstrip()[:-1])
                while i < len(lines) and lines[i].strip().startswith("#"):
                    i += 1
                continue
            buf.append(raw)
            break
        joined = " ".join(s.strip() for s in buf if s.strip())
        keyword, _, rest = joined.partition(" ")
        docs: list[tuple[str, str]] = []
        if keyword.upper() in ("RUN", "COPY", "ADD"):
            for m in _HEREDOC.finditer(rest):
                body: list[str] = []
                while i < len(lines):
                    candidate = lines[i].lstrip("\t") if m.group(1) else lines[i]
                    i += 1
                    if candidate.strip() == m.group(3):
                        break
                    body.append(candidate)
                docs.append((m.group(3), "\n".join(body) + "\n"))
        out.append(Instruction(start, keyword.upper(), rest.strip(), tuple(docs)))
    return out


def parse_stages(
    text: str, *, source: str = "Dockerfile", base_workdir: Callable[[str], str] | None = None
) -> list[Stage]:
    """Every stage of the Dockerfile ``text``, in order; the last one is the image.
    ``base_workdir(ref)``: the working directory an image starts in (its own ``WORKDIR``)."""
    stages: list[Stage] = []
    global_args: dict[str, str] = {}
    for ins in instructions(text):

        def fail(why: str, ins: Instruction = ins) -> DockerfileError:
            return DockerfileError(f"{source}:{ins.line}: `{ins.text[:120]}`: {why}")

        if ins.keyword == "FROM":
            stages.append(_from(ins, stages, global_args, fail))
            if stages[-1].base_stage is None and base_workdir is not None:
                stages[-1].config.workdir = base_workdir(stages[-1].base)
        elif not stages:
            if ins.keyword != "ARG":
                raise fail("only ARG may come before the first FROM")
            for k, v in _env_pairs(ins.rest, "ARG", global_args) or []:
                global_args[k] = v or ""
        else:
            _apply(stages[-1], ins, stages, fail, source)
    if not stages:
        raise DockerfileError(f"{source}: no FROM instruction")
    return stages


def _from(ins: Instruction, stages: list[Stage], args: dict[str, str], fail) -> Stage:  # type: ignore[no-untyped-def]
    words = substitute(ins.rest, args).split()
    words = [w for w in words if not w.startswith("--platform")]
    if not words:
        raise fail("FROM needs an image")
    name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
    base = words[0]
    stage = Stage(len(stages), base, name.lower() if name else None, line=ins.line)
    stage.args = dict(args)
    stage.config.env["PATH"] = DEFAULT_PATH  # what Docker's images set
    for earlier in stages:
        if base.lower() in (earlier.name, str(earlier.index)):
            stage.base_stage = earlier.index
            stage.config = earlier.config.model_copy(deep=True)
    return stage


def _apply(stage: Stage, ins: Instruction, stages: list[Stage], fail, source: str) -> None:  # type: ignore[no-untyped-def]
    cfg, kw = stage.config, ins.keyword
    values = {**stage.args, **cfg.env}
    if kw == "RUN":
        stage.steps.append(_run(stage, ins, values, fail))
    elif kw in ("COPY", "ADD"):
        stage.steps.append(_copy(stage, ins, values, fail))
    elif kw == "WORKDIR":
        cfg.workdir = absolute(substitute(ins.rest, values), cfg.workdir)
        stage.steps.append(WorkdirStep(ins.line, cfg.workdir, ins.text))
    elif kw in ("ENV", "ARG"):
        pairs = _env_pairs(ins.rest, kw, values)
        if pairs is None:
            raise fail(f"cannot parse {kw}; write {kw} NAME=value")
        for k, v in pairs:
            if kw == "ENV":
                cfg.env[k] = v or ""
            elif v is not None or k not in stage.args:
                stage.args[k] = v or ""
    elif kw == "USER":
        cfg.user = substitute(ins.rest, values).strip() or "root"
    elif kw == "SHELL":
        form = _json_list(ins.rest)
        if not form:
            raise fail('SHELL takes a JSON list, e.g. SHELL ["/bin/bash", "-c"]')
        cfg.shell = form
    elif kw == "EXPOSE":
        cfg.expose += substitute(ins.rest, values).split()
    elif kw in ("CMD", "ENTRYPOINT"):
        form = _json_list(ins.rest)
        setattr(cfg, kw.lower(), form if form is not None else [*cfg.shell, ins.rest])
    elif kw in _RECORDED:
        stage.notes.append(f"{source}:{ins.line}: {kw} recorded, not acted on")
    else:
        raise fail(f"{kw} cannot be honoured without Docker")


def _run(stage: Stage, ins: Instruction, values: dict[str, str], fail) -> RunStep:  # type: ignore[no-untyped-def]
    rest, network = ins.rest, True
    while rest.startswith("--"):
        flag, _, rest = rest.partition(" ")
        rest = rest.strip()
        if flag == "--network=none":
            network = False
        elif flag.startswith("--mount=") and "type=cache" in flag:
            stage.notes.append(f"line {ins.line}: RUN {flag} ignored (a cache only)")
        elif flag.startswith("--network="):
            continue
        else:
            raise fail(f"RUN {flag} cannot be honoured without Docker")
    cfg = stage.config
    exec_form = _json_list(rest) if not ins.heredocs else None
    if exec_form is not None:
        argv = exec_form
    elif ins.heredocs and _HEREDOC.sub("", rest).strip() == "":
        argv = [*cfg.shell, ins.heredocs[0][1]]  # RUN <<EOF: the body is the script
    else:
        script = rest
        for name, body in ins.heredocs:  # the shell reads the heredocs itself
            script += f"\n{body}{name}"
        argv = [*cfg.shell, script]
    env = tuple({**stage.args, **cfg.env}.items())
    return RunStep(ins.line, tuple(argv), cfg.workdir, env, cfg.user, ins.text, network)


def _copy(stage: Stage, ins: Instruction, values: dict[str, str], fail) -> CopyStep:  # type: ignore[no-untyped-def]
    words = _json_list(ins.rest)
    if words is None:
        try:
            words = shlex.split(ins.rest)
        except ValueError:
            raise fail("cannot parse the arguments") from None
    chmod = chown = from_stage = None
    exclude: list[str] = []
    while words and words[0].startswith("--"):
        flag, _, value = words.pop(0).partition("=")
        if flag == "--chmod":
            try:
                chmod = int(value, 8)
            except ValueError:
                raise fail(f"--chmod={value} is not an octal mode") from None
        elif flag == "--chown":
            chown = substitute(value, values)
        elif flag == "--from":
            from_stage = substitute(value, values).lower()
        elif flag == "--exclude":
            exclude.append(value)
        elif flag not in ("--link", "--parents"):
            raise fail(f"{flag} cannot be honoured without Docker")
    if len(words) < 2:
        raise fail(f"{ins.keyword} needs at least one source and a destination")
    *sources, dest = (substitute(w, values) for w in words)
    docs = dict(ins.heredocs)
    inline = tuple((s[2:].lstrip("-").strip("\"'"), docs.get(s[2:].lstrip("-").strip("\"'"), ""))
                   for s in sources if s.startswith("<<"))  # fmt: skip
    files = tuple(s for s in sources if not s.startswith("<<"))
    for s in files:
        if s.startswith(("git@", "https://github.com")) and s.endswith(".git"):
            raise fail("ADD of a git repository cannot be honoured; vendor it in the context")
        if from_stage is None and "://" not in s and ".." in PurePosixPath(s).parts:
            raise fail(f"source {s!r} is outside the build context")
    is_dir = dest.endswith("/") or dest in (".", "./") or len(sources) > 1
    target = absolute(dest, stage.config.workdir) + ("/" if is_dir and dest != "/" else "")
    extract = ins.keyword == "ADD"
    copy = Copy(ins.line, files, target, extract, chmod, tuple(exclude))
    return CopyStep(ins.line, copy, from_stage, inline, chown, ins.text)
