"""The one Dockerfile reader: a Dockerfile read as Docker reads it.

``parse_stages`` gives one ``Stage`` per ``FROM`` with its steps (``Run``, ``Copy``,
``Workdir``: what changes files, in order), its settings (``Setting``: each instruction that
changes only the configuration, with its line) and the config the stage leaves (``ENV``,
``WORKDIR``, ``USER``, ``SHELL``, ``EXPOSE``, ``CMD``, ``ENTRYPOINT``). ``ARG`` before the first
``FROM`` is global (usable in ``FROM``); after it, per stage. What cannot be honoured without
Docker (``ONBUILD``, ``RUN --mount=type=secret``, ``ADD`` of a git repository) is an error
naming the line. Each mode checks the stages against what it can honour: the image builder
(``image_build``) honours them all; the host-filesystem mode projects them onto ``/app``
(``host_build.host_plan``).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from envlab.core.errors import ConfigError
from envlab.sandbox.image.runner import DEFAULT_PATH
from envlab.sandbox.image.store import ImageConfig

_HEREDOC = re.compile(r"<<(-?)([\"']?)([A-Za-z_][A-Za-z0-9_]*)\2")
_RECORDED = {"LABEL", "MAINTAINER", "HEALTHCHECK", "STOPSIGNAL", "VOLUME"}


class DockerfileError(ConfigError):
    """An instruction that cannot be honoured; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class Copy:
    line: int
    sources: tuple[str, ...]
    """Paths or glob patterns in the build context, or in ``from_stage``."""
    dest: str
    """Absolute; ends with / when it must be a directory."""
    extract: bool = False
    """ADD: unpack local tar archives, as Docker does."""
    chmod: int | None = None
    exclude: tuple[str, ...] = ()
    """Patterns of the context left out, on top of ``.dockerignore``."""
    from_stage: str | None = None
    """A stage's name or index, or an image reference (``COPY --from``)."""
    inline: tuple[tuple[str, str], ...] = ()
    """Heredoc sources: ``(file name, content)``."""
    chown: str | None = None
    text: str = ""


@dataclass(frozen=True, slots=True)
class Run:
    line: int
    argv: tuple[str, ...]
    workdir: str
    env: tuple[tuple[str, str], ...]
    text: str
    user: str = "root"
    network: bool = True
    flags: tuple[str, ...] = ()
    """The ``RUN --...`` flags as written."""


@dataclass(frozen=True, slots=True)
class Workdir:
    line: int
    path: str
    text: str = ""


Step = Run | Copy | Workdir


@dataclass(frozen=True, slots=True)
class Setting:
    """An instruction that changes the configuration only (``ENV``, ``USER``, ``EXPOSE``, ...)."""

    line: int
    keyword: str
    value: str
    """Its argument, variables substituted."""
    text: str


@dataclass
class Stage:
    index: int
    base: str
    """An image reference, the name/index of an earlier stage, or "" (no ``FROM`` at all)."""
    name: str | None = None
    base_stage: int | None = None
    line: int = 0
    text: str = ""
    steps: list[Step] = field(default_factory=list)
    settings: list[Setting] = field(default_factory=list)
    config: ImageConfig = field(default_factory=ImageConfig)
    args: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


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


_VAR = re.compile(r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:?[-+])?(?P<word>[^}]*)\}|"
                  r"(?P<plain>[A-Za-z_][A-Za-z0-9_]*))")  # fmt: skip


def substitute(text: str, values: dict[str, str]) -> str:
    """Docker's ``$VAR``, ``${VAR}``, ``${VAR:-default}`` and ``${VAR:+alt}``."""

    def repl(m: re.Match[str]) -> str:
        value = values.get(m.group("braced") or m.group("plain"))
        op = m.group("op")
        if op and op.endswith("-"):
            return value if value else m.group("word")
        if op and op.endswith("+"):
            return m.group("word") if value else ""
        return value or ""

    return _VAR.sub(repl, text.replace("\\$", "\0")).replace("\0", "$")


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
            raw = lines[i].rstrip()
            i += 1
            if raw.endswith("\\"):
                buf.append(raw[:-1])
                while i < len(lines) and lines[i].strip().startswith("#"):
                    i += 1
                if i < len(lines):
                    continue
            else:
                buf.append(raw)
            break
        keyword, _, rest = " ".join(s.strip() for s in buf if s.strip()).partition(" ")
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


def logical_lines(text: str) -> list[tuple[int, str]]:
    """``(first line number, instruction)`` of each instruction of ``text``."""
    return [(ins.line, ins.text) for ins in instructions(text)]


def _docker_base(_ref: str) -> ImageConfig:
    return ImageConfig(env={"PATH": DEFAULT_PATH})  # what Docker's images set


def parse_stages(
    text: str,
    *,
    source: str = "Dockerfile",
    base_config: Callable[[str], ImageConfig] = _docker_base,
    need_from: bool = True,
) -> list[Stage]:
    """Every stage of the Dockerfile ``text``, in order; the last one is the image.
    ``base_config(ref)``: the config an image starts with (its ``WORKDIR``, ``ENV``).
    ``need_from=False``: instructions before any ``FROM`` make a stage with no base ("")."""
    stages: list[Stage] = []
    global_args: dict[str, str] = {}
    for ins in instructions(text):

        def fail(why: str, ins: Instruction = ins) -> DockerfileError:
            return DockerfileError(f"{source}:{ins.line}: `{ins.text[:120]}`: {why}")

        if ins.keyword == "FROM":
            if stages and not stages[-1].base:
                raise fail("FROM must come before every instruction but ARG")
            stages.append(_from(ins, stages, global_args, base_config, fail))
        elif not stages and ins.keyword == "ARG":
            for k, v in _env_pairs(ins.rest, "ARG", global_args) or []:
                global_args[k] = v or ""
        elif not stages and need_from:
            raise fail("only ARG may come before the first FROM")
        else:
            if not stages:
                stages.append(Stage(0, "", config=base_config(""), args=dict(global_args)))
            _apply(stages[-1], ins, fail, source)
    if not stages and need_from:
        raise DockerfileError(f"{source}: no FROM instruction")
    return stages or [Stage(0, "", config=base_config(""), args=global_args)]


def _from(  # type: ignore[no-untyped-def]
    ins: Instruction, stages: list[Stage], args: dict[str, str], base_config, fail
) -> Stage:
    words = [w for w in substitute(ins.rest, args).split() if not w.startswith("--platform")]
    if not words:
        raise fail("FROM needs an image")
    name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
    base = words[0]
    stage = Stage(len(stages), base, name.lower() if name else None, line=ins.line, text=ins.text)
    stage.args = dict(args)
    for earlier in stages:
        if base.lower() in (earlier.name, str(earlier.index)):
            stage.base_stage = earlier.index
            stage.config = earlier.config.model_copy(deep=True)
    if stage.base_stage is None:
        stage.config = base_config(base)
    return stage


def _apply(stage: Stage, ins: Instruction, fail, source: str) -> None:  # type: ignore[no-untyped-def]
    cfg, kw = stage.config, ins.keyword
    values = {**stage.args, **cfg.env}
    if kw == "RUN":
        stage.steps.append(_run(stage, ins, fail))
    elif kw in ("COPY", "ADD"):
        stage.steps.append(_copy(stage, ins, values, fail))
    elif kw == "WORKDIR":
        cfg.workdir = absolute(substitute(ins.rest, values), cfg.workdir)
        stage.steps.append(Workdir(ins.line, cfg.workdir, ins.text))
        return
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
        raise fail(f"{kw} is not supported: it cannot be honoured without Docker")
    if kw not in ("RUN", "COPY", "ADD"):
        value = cfg.user if kw == "USER" else substitute(ins.rest, values)
        stage.settings.append(Setting(ins.line, kw, value, ins.text))


def _run(stage: Stage, ins: Instruction, fail) -> Run:  # type: ignore[no-untyped-def]
    rest, network, flags = ins.rest, True, []
    while rest.startswith("--"):
        flag, _, rest = rest.partition(" ")
        rest = rest.strip()
        flags.append(flag)
        if flag == "--network=none":
            network = False
        elif flag.startswith("--mount=") and "type=cache" in flag:
            stage.notes.append(f"line {ins.line}: RUN {flag} ignored (a cache only)")
        elif not flag.startswith("--network="):
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
    return Run(ins.line, tuple(argv), cfg.workdir, env, ins.text, cfg.user, network, tuple(flags))


def _copy(stage: Stage, ins: Instruction, values: dict[str, str], fail) -> Copy:  # type: ignore[no-untyped-def]
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
    names = [s[2:].lstrip("-").strip("\"'") for s in sources if s.startswith("<<")]
    files = tuple(s for s in sources if not s.startswith("<<"))
    for s in files:
        if s.startswith(("git@", "https://github.com")) and s.endswith(".git"):
            raise fail("ADD of a git repository cannot be honoured; vendor it in the context")
        if from_stage is None and "://" not in s and ".." in PurePosixPath(s).parts:
            raise fail(f"source {s!r} is outside the build context (environment/)")
    is_dir = dest.endswith(("/", "/.")) or dest == "." or len(sources) > 1
    target = absolute(dest, stage.config.workdir) + ("/" if is_dir and dest != "/" else "")
    inline = tuple((n, docs.get(n, "")) for n in names)
    extract = ins.keyword == "ADD"
    return Copy(ins.line, files, target, extract, chmod, tuple(exclude), from_stage, inline,
                chown, ins.text)  # fmt: skip


def _json_list(rest: str) -> list[str] | None:
    if not rest.startswith("["):
        return None
    try:
        value = json.loads(rest)
    except json.JSONDecodeError:
        return None
    return [str(v) for v in value] if isinstance(value, list) else None


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
        name, _, value = rest.partition(" ")  # legacy form: ENV NAME value with spaces
        return [(name, substitute(value.strip().strip('"'), values))]
    pairs: list[tuple[str, str | None]] = []
    for w in words:
        k, sep, v = w.partition("=")
        if not sep or not k:
            return None
        pairs.append((k, substitute(v, {**values, **{a: b or "" for a, b in pairs}})))
    return pairs
