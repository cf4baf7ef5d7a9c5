"""What a task's test scripts fetch from the internet at grading time, read from the scripts.

``scan_needs`` reads ``test.sh`` (or TB1's ``run-tests.sh``) and every ``*.sh`` under ``tests/``
the way a shell would split them (continuations joined, heredoc bodies skipped, commands split
on ``&& ; | || &``), follows ``source``/``bash`` of a script in ``tests/`` where it is called, and
lists uv installers, ``uv``/``uvx``/``pip`` requirements, apt packages and the other URLs. It
reads only; nothing is run. The result drives :func:`envlab.sandbox.tasks.offline.warmup_script`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

UV_INSTALLER = re.compile(
    r"(?:https?://)?astral\.sh/uv/(?:(?P<ver>[0-9][A-Za-z0-9.+-]*)/)?install\.sh"
    r"|https?://github\.com/astral-sh/uv/releases/download/(?P<gh>[0-9][A-Za-z0-9.+-]*)"
    r"/uv-installer\.sh"
)
URL = re.compile(r"https?://[^\s'\"`<>)\]}|;&\\]+")
HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
_SEPARATORS = {"&&", "||", ";", ";;", "|", "|&", "&", "(", ")", "\n"}
_REDIRECTS = {">", ">>", "<", "<<", "<<<", ">&", "<&", "&>", "&>>", ">|", "<>"}
_PREFIXES = {"sudo", "env", "time", "exec", "command", "nohup", "then", "do", "else", "elif"}
_PREFIXES |= {"if", "while", "until", "!", "{", "}", "xargs"}
# options that take a value in the next word (no "=")
_PIP_VALUE_OPTS = {"-r", "--requirement", "-c", "--constraint", "-e", "--editable", "-t"}
_PIP_VALUE_OPTS |= {"--target", "--prefix", "--root", "--platform", "--python-version", "--abi"}
_PIP_VALUE_OPTS |= {"--implementation", "--src", "--upgrade-strategy", "--progress-bar", "--log"}
_PIP_VALUE_OPTS |= {"--trusted-host", "--cache-dir", "--proxy", "--retries", "--timeout"}
_PIP_VALUE_OPTS |= {"--exists-action", "--cert", "--client-cert", "-C", "--config-settings"}
_PIP_VALUE_OPTS |= {"--global-option", "--no-binary", "--only-binary", "--report", "--python"}
_PIP_VALUE_OPTS |= {"--root-user-action", "--keyring-provider", "-p", "--index-strategy"}
_INDEX_OPTS = {"-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--index"}
_INDEX_OPTS |= {"--default-index"}
_UV_VALUE_OPTS = _PIP_VALUE_OPTS | {"--group", "--optional", "--extra", "--directory", "--tag"}
_UV_VALUE_OPTS |= {"--project", "--rev", "--branch", "--package", "--script", "-m", "--marker"}
_UV_VALUE_OPTS |= {"--bounds", "--config-file", "--color", "--resolution", "--prerelease"}
_UV_VALUE_OPTS |= {"--exclude-newer", "--link-mode", "--with-requirements", "--with-editable"}
_UV_VALUE_OPTS |= {"--env-file", "--from", "--with"}
_APT_VALUE_OPTS = {"-o", "--option", "-t", "--target-release", "-c", "--config-file"}


class Install(BaseModel):
    """One install command's requirements, in script order, with its index options."""

    tool: Literal["uv", "uvx", "pip"]
    requirements: list[str]
    index_options: list[str] = Field(default_factory=list)
    """``--index-url X`` and the like, to repeat when warming the cache."""
    with_requirements: list[str] = Field(default_factory=list)
    """``uv run --with X`` / ``uvx --with X``: extra packages of an ephemeral environment."""


class VerifierNeeds(BaseModel):
    """What the test scripts fetch at grading time. Requirement strings are kept as written."""

    uv_versions: list[str] = Field(default_factory=list)
    """From uv's installer URLs; ``"latest"`` for the unversioned one."""
    uv_requirements: list[str] = Field(default_factory=list)
    pip_requirements: list[str] = Field(default_factory=list)
    apt_packages: list[str] = Field(default_factory=list)
    uv_pythons: list[str] = Field(default_factory=list)
    """``uv python pin X`` / ``uv python install X`` / ``--python X``: interpreters uv must find."""
    installs: list[Install] = Field(default_factory=list)
    """The install commands in the order the scripts run them (the warm-up replays them)."""
    local_installs: list[str] = Field(default_factory=list)
    """``pip install -e .`` and other local paths: not cached (their dependencies are unknown)."""
    urls: list[str] = Field(default_factory=list)
    """Every other http(s) URL the scripts mention (for the report; they need the network)."""
    scripts: list[str] = Field(default_factory=list)
    """The scripts read, relative to the task folder where possible."""

    @property
    def uses_uv(self) -> bool:
        return bool(self.uv_versions or self.uv_requirements or self.uv_pythons)


def scan_needs(tests_dir: Path, test_sh: Path | None = None) -> VerifierNeeds:
    """Scan ``test_sh`` (default ``tests_dir/test.sh``) and every ``*.sh`` under ``tests_dir``."""
    scan = _Scan(tests_dir)
    first = test_sh if test_sh is not None else tests_dir / "test.sh"
    if first.is_file():
        scan.script(first)
    for path in sorted(tests_dir.rglob("*.sh")) if tests_dir.is_dir() else []:
        scan.script(path)
    return scan.needs


def _add(items: list[str], *new: str) -> None:
    for item in new:
        if item and item not in items:
            items.append(item)


class _Scan:
    def __init__(self, tests_dir: Path) -> None:
        self.tests_dir = tests_dir
        self.needs = VerifierNeeds()
        self.seen: set[Path] = set()

    def script(self, path: Path) -> None:
        key = path.resolve()
        if key in self.seen or not path.is_file():
            return
        self.seen.add(key)
        self.needs.scripts.append(_rel(path, self.tests_dir.parent))
        text = path.read_text(errors="replace")
        for m in UV_INSTALLER.finditer(text):
            _add(self.needs.uv_versions, m.group("ver") or m.group("gh") or "latest")
        body = _strip_heredocs(text.replace("\\\n", " "))
        for url in URL.findall(text):
            url = url.rstrip(".,:'\"")
            if not UV_INSTALLER.fullmatch(url):
                _add(self.needs.urls, url)
        for words in _commands(body):
            self.command(words)

    def command(self, words: list[str]) -> None:
        while words and (words[0] in _PREFIXES or re.fullmatch(r"[A-Za-z_]\w*=.*", words[0])):
            words = words[1:]
        if not words:
            return
        name = words[0].rsplit("/", 1)[-1]
        args = words[1:]
        if name in {"source", ".", "bash", "sh"} and args:
            target = self.local_file(args[0])
            if target is not None:
                self.script(target)
        elif name == "uv":
            self.uv(_skip_options(args, _UV_VALUE_OPTS))
        elif name == "uvx":
            self.uvx(args)
        elif re.fullmatch(r"pip3?(\.\d+)?", name) and args[:1] == ["install"]:
            self.pip(args[1:])
        elif re.fullmatch(r"python3?(\.\d+)?", name) and args[:3] == ["-m", "pip", "install"]:
            self.pip(args[3:])
        elif name in {"apt-get", "apt"}:
            rest = _skip_options(args, _APT_VALUE_OPTS)
            if rest[:1] == ["install"]:
                _add(self.needs.apt_packages, *_positional(rest[1:], _APT_VALUE_OPTS)[0])

    def uv(self, args: list[str]) -> None:
        sub, rest = (args[0], args[1:]) if args else ("", [])
        if sub == "add":
            self.install("uv", rest)
        elif sub == "pip" and rest[:1] == ["install"]:
            self.install("uv", rest[1:])
        elif sub == "run":
            withs = _option_values(rest, "--with")
            if withs:
                self.needs.installs.append(
                    Install(tool="uv", requirements=[], with_requirements=withs)
                )
                _add(self.needs.uv_requirements, *withs)
        elif sub == "tool" and rest[:1] == ["run"]:
            self.uvx(rest[1:])
        elif sub == "python" and rest[:1] in (["pin"], ["install"]):
            _add(self.needs.uv_pythons, *_positional(rest[1:], _UV_VALUE_OPTS)[0])
        if sub in {"init", "venv", "run", "sync", "add"}:
            _add(self.needs.uv_pythons, *_option_values(rest, "--python", "-p"))

    def uvx(self, args: list[str]) -> None:
        withs = _option_values(args, "--with")
        source = _option_values(args, "--from")
        pos, index = _positional(args, _UV_VALUE_OPTS, stop_at_first=True)
        reqs = source or pos[:1]
        self.needs.installs.append(
            Install(tool="uvx", requirements=reqs, index_options=index, with_requirements=withs)
        )
        _add(self.needs.uv_requirements, *reqs, *withs)

    def pip(self, args: list[str]) -> None:
        self.install("pip", args)

    def install(self, tool: Literal["uv", "pip"], args: list[str]) -> None:
        reqs, index = _positional(args, _UV_VALUE_OPTS if tool == "uv" else _PIP_VALUE_OPTS)
        for i, word in enumerate(args[:-1]):
            if word in {"-r", "--requirement"}:
                path = self.local_file(args[i + 1])
                if path is not None:
                    file_reqs, file_index = _requirements_file(path)
                    reqs += file_reqs
                    index += file_index
            elif word in {"-e", "--editable"}:
                _add(self.needs.local_installs, args[i + 1])
        local = [r for r in reqs if _is_local(r)]
        _add(self.needs.local_installs, *local)
        reqs = [r for r in reqs if not _is_local(r)]
        if not reqs:
            return
        self.needs.installs.append(Install(tool=tool, requirements=reqs, index_options=index))
        target = self.needs.uv_requirements if tool == "uv" else self.needs.pip_requirements
        _add(target, *reqs)

    def local_file(self, word: str) -> Path | None:
        """A path in a script that names a file in tests/ ($TEST_DIR/x, /tests/x, x)."""
        rel = re.sub(r"^(\$\{?TEST_DIR\}?|/tests)/", "", word)
        if rel.startswith(("/", "$", "~")):
            return None
        path = self.tests_dir / rel
        return path if path.is_file() else None


def _rel(path: Path, base: Path) -> str:
    try:
        return str(path.resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path)


def _strip_heredocs(text: str) -> str:
    out: list[str] = []
    lines = iter(text.splitlines())
    for line in lines:
        out.append(line)
        for m in HEREDOC.finditer(line):
            end = m.group(2)
            for body in lines:
                if body.strip() == end:
                    break
    return "\n".join(out)


def _commands(text: str) -> Iterator[list[str]]:
    """Simple commands as word lists, redirections dropped."""
    for line in text.splitlines():
        lex = shlex.shlex(line, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        lex.commenters = "#"
        try:
            tokens = list(lex)
        except ValueError:  # unbalanced quote: fall back to plain words
            tokens = line.split("#", 1)[0].split()
        words: list[str] = []
        skip = False
        for i, tok in enumerate(tokens):
            if skip:
                skip = False
            elif tok in _SEPARATORS:
                if words:
                    yield words
                words = []
            elif tok in _REDIRECTS:
                skip = True
            elif tok.isdigit() and i + 1 < len(tokens) and tokens[i + 1] in _REDIRECTS:
                continue
            else:
                words.append(tok)
        if words:
            yield words


def _skip_options(args: list[str], value_opts: set[str]) -> list[str]:
    """Drop leading options (global ones before a subcommand)."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in value_opts | _INDEX_OPTS else 1
    return args[i:]


def _positional(
    args: list[str], value_opts: set[str], stop_at_first: bool = False
) -> tuple[list[str], list[str]]:
    """Positional words and the index options among ``args``."""
    pos: list[str] = []
    index: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        opt = word.split("=", 1)[0]
        if word == "--":
            pos += args[i + 1 :]
            break
        if opt in _INDEX_OPTS:
            index += [word] if "=" in word else args[i : i + 2]
            i += 1 if "=" in word else 2
        elif word.startswith("-"):
            i += 2 if word in value_opts else 1
        else:
            pos.append(word)
            if stop_at_first:
                break
            i += 1
    return pos, index


def _option_values(args: list[str], *names: str) -> list[str]:
    """Values of ``--with X`` / ``--with=X,Y`` (comma-separated lists split)."""
    values: list[str] = []
    for i, word in enumerate(args):
        opt, eq, val = word.partition("=")
        if opt in names and eq:
            values += val.split(",")
        elif word in names and i + 1 < len(args):
            values += args[i + 1].split(",")
    return [v for v in values if v]


def _is_local(req: str) -> bool:
    if "://" in req or " @ " in req:
        return False
    return req.startswith((".", "/", "~", "$")) or "/" in req or req.endswith((".whl", ".tar.gz"))


def _requirements_file(path: Path) -> tuple[list[str], list[str]]:
    reqs: list[str] = []
    index: list[str] = []
    for raw in path.read_text(errors="replace").splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        words = line.split()
        if words[0].split("=", 1)[0] in _INDEX_OPTS:
            index += words
        elif not line.startswith("-"):
            reqs.append(line)
    return reqs, index
