"""Which of Harbor's verifier modes an imported Terminal-Bench task needs, read from its scripts.

Harbor 0.25 grades a task that does not say in the ``separate`` mode: a fresh sandbox from the
pristine image, into which only the agent's workspace (the image's ``WORKDIR``, ``/app`` in TB)
and artifacts are carried. TB1 ran its tests in the agent's own container, so a task whose tests
need the agent's system state is written ``[verifier] environment_mode = "shared"``. It is when

(a) ``solve.sh`` leaves a process running (a server in the background, a daemon);
(b) ``solve.sh`` changes system state outside the workspace that the tests can see: it writes
    files outside ``WORKDIR``, ``/tmp`` and ``/logs``; installs system packages or global tools;
    changes users, services, cron or git's global configuration;
(c) the tests read a path outside ``WORKDIR`` and ``/tests`` that ``solve.sh`` writes.

This is a heuristic: a few regular expressions per reason over the text of the scripts, blind to
what the programs ``solve.sh`` runs do. ``envlab task check`` confirms it dynamically: a task
whose oracle fails in ``separate`` but passes in ``shared`` is told to declare ``shared``.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from envlab.importers.terminal_bench.shell_text import (
    PATH,
    absolute_paths,
    args_pattern,
    mask_quotes,
    read_script,
    words,
)

TB_WORKDIR = "/app"
"""The workspace when the Dockerfile does not say (Terminal-Bench's images work in ``/app``)."""

NOT_STATE = ("/tmp", "/logs", "/dev", "/proc", "/sys")
"""Outside the workspace but not state the tests see: scratch, logs, kernel interfaces."""

SYSTEM_PROGRAMS = ("/bin", "/sbin", "/usr/bin", "/usr/sbin", "/lib", "/lib64", "/usr/lib")
"""Paths both scripts name to run programs (``#!/usr/bin/env``); writes there are (b)'s."""

_Q = r"[\"']?"
_CMD = r"(?:^|[;&|(`{]|\b(?:then|do|else|sudo|exec|xargs)\b)\s*"
"""Where a command starts: a line, after an operator, after a keyword that runs one."""
_ARGS = args_pattern()

# (a) a process left running
_SERVICE = re.compile(
    r"(^|[\s;(])(nohup|setsid|daemonize)\s|[^&]&\s*(#.*)?$|\bservice\s+\S+\s+(re)?start\b|"
    r"\bsystemctl\s+(re)?start\b|--?daemon(ize)?\b|"
    # a daemon run as a command (not an argument of apt-get)
    rf"{_CMD}(\S*/)?(nginx|sshd|redis-server|mysqld|mongod|cron|apache2ctl|php-fpm\S*|dockerd)"
    r"(?=\s|$)(?!\s+-[tTvVh]\b)"  # not `nginx -t`: a check, not a start
)

# (b) writes outside the workspace: the path after `>`, `tee`, `-o`, ...; every path of the
# commands that take many; the last word of those whose last is the target
_WRITE_TO = [
    re.compile(rf"(?<![-=<])>{{1,2}}\|?\s*{_Q}{PATH}"),
    re.compile(rf"\btee\s+(?:-\S+\s+)*{_Q}{PATH}"),
    re.compile(
        rf"\b(?:curl|wget)\b[^;&|\n]*\s(?:-o|-O|--output|--output-document)[=\s]*{_Q}{PATH}"
    ),
    re.compile(rf"(?:\btar\b[^;&|\n]*\s(?:-C|--directory)|\bunzip\b[^;&|\n]*\s-d)[=\s]*{_Q}{PATH}"),
    re.compile(rf"\bdd\b[^;&|\n]*\bof={_Q}{PATH}"),
]
_WRITE_ALL = re.compile(
    rf"{_CMD}(?:mkdir|touch|rm|rmdir|chmod|chown|chgrp|truncate|unlink|shred)\s{_ARGS}"
)
_WRITE_LAST = re.compile(rf"{_CMD}(?P<cmd>cp|mv|ln|install|rsync|git\s+clone|sed|perl)\s{_ARGS}")
_IN_PLACE = re.compile(r"-[a-zA-Z]*i\S*|--in-place\S*")
"""``sed -i``, ``perl -pi``: the last word is edited."""
# (c) writes that a program of solve.sh's makes: Python's open(PATH, "w"), an output option
_WRITE_BY_PROGRAM = [
    re.compile(rf"\bopen\(\s*[rbuf]?{_Q}{PATH}{_Q}\s*,\s*(?:mode\s*=\s*)?[rbuf]?[\"'][wax]"),
    re.compile(rf"\s(?:-o|--out\w*|--output[\w-]*|--dest\w*|--save[\w-]*)[=\s]{_Q}{PATH}"),
]

# (b) installs: system packages, global tools (pip is decided apart: a venv is the workspace's)
_SYSTEM_PACKAGES = [
    re.compile(r"\b(?:apt-get|apt|aptitude|yum|dnf|microdnf|zypper)\s+(?:-\S+\s+)*install\b"),
    re.compile(r"\bapk\s+(?:-\S+\s+)*add\b"),
    re.compile(r"\bdpkg\s+(?:-\S+\s+)*(?:-i|--install)\b"),
]
_GLOBAL_TOOLS = [
    re.compile(r"\b(?:npm|pnpm)\s+(?:i|install|add)\b[^;&|\n]*\s(?:-g|--global)\b"),
    re.compile(r"\b(?:npm|pnpm)\s+(?:-g|--global)\s+(?:i|install|add)\b"),
    re.compile(r"\byarn\s+global\s+add\b"),
    re.compile(r"\b(?:cargo|gem|go|pipx|conda|mamba)\s+install\b"),
    re.compile(r"\buv\s+tool\s+install\b"),
    re.compile(r"\bpython[\d.]*\s+(?:\S*get-pip\.py|-m\s+ensurepip)\b"),
    re.compile(r"\bmake\s+(?:[^;&|\n]*\s)?install(?![\w-])"),
]
_PIP = re.compile(
    r"(?<![\w./-])(?P<exe>(?:[\w./~-]*/)?(?:uv\s+pip|python[\d.]*\s+-m\s+pip|pip[\d.]*))"
    rf"\s+install\b{_ARGS}"
)
_ACTIVATE = re.compile(r"(?:^|[;&|])\s*(?:source|\.)\s+[\"']?(?P<venv>\S+?)/bin/activate\b")

# (b) users, services, cron, git's global configuration
_SYSTEM_CONFIG = [
    re.compile(r"\b(?:useradd|adduser|usermod|userdel|groupadd|groupmod|chpasswd|chsh|visudo)\b"),
    re.compile(rf"{_CMD}crontab\b"),
    re.compile(r"\bsystemctl\s+(?:enable|disable|start|restart|reload|stop|mask|daemon-reload)\b"),
    re.compile(r"\bservice\s+\S+\s+(?:start|restart|reload|stop)\b"),
    re.compile(r"\bgit\s+config\s+(?:[^;&|\n]*\s)?--(?:global|system)\b"),
    re.compile(r"\bupdate-(?:alternatives|rc\.d)\b"),
]


def shared_reasons(solve: Path, tests: Path, workdir: str = TB_WORKDIR) -> list[str]:
    """Why the task's tests need the agent's system state (``shared``); empty: ``separate``.

    ``solve``: the task's ``solve.sh`` (none: nothing to read); ``tests``: its ``tests/`` folder;
    ``workdir``: the image's working directory, the workspace ``separate`` carries over."""
    if not solve.is_file():
        return []
    script = read_script(solve.read_text(errors="replace"))
    lines = [mask_quotes(ln) for ln in script.commands]
    running = [ln for ln, masked in zip(script.commands, lines, strict=True)
               if _SERVICE.search(masked)]  # fmt: skip
    reasons: list[tuple[str, list[str]]] = [
        ("solve.sh leaves a process running", running),
        ("solve.sh writes outside the workspace",
         [p for p in written(lines) if outside(p, workdir)]),
        ("solve.sh installs system packages", _matches(_SYSTEM_PACKAGES, lines)),
        ("solve.sh installs global tools",
         _matches(_GLOBAL_TOOLS, lines) + _global_pip(lines, workdir)),
        ("solve.sh changes users, services, cron or git's global config",
         _matches(_SYSTEM_CONFIG, lines)),
    ]  # fmt: skip
    out = [f"{why} ({', '.join(_brief(e.strip()) for e in _unique(seen)[:3])})"
           for why, seen in reasons if seen]  # fmt: skip
    programs = [m["path"] for p in _WRITE_BY_PROGRAM
                for ln in script.commands + script.embedded for m in p.finditer(ln)]  # fmt: skip
    solve_writes = written(lines) + programs
    for path in tests_read(tests, workdir):
        if any(_same_place(path, p) for p in solve_writes):
            out.append(f"the tests read {_brief(path)}, which solve.sh writes")
            break
    return out


def starts_a_service(solve: Path) -> bool:
    """Whether ``solve.sh`` leaves a process running for the tests (reason (a))."""
    if not solve.is_file():
        return False
    lines = read_script(solve.read_text(errors="replace")).commands
    return any(_SERVICE.search(mask_quotes(ln)) for ln in lines)


def workdir_of(dockerfile: Path) -> str:
    """The last stage's ``WORKDIR`` in ``dockerfile``, else TB's ``/app`` (also where it is ``/``
    or names a variable, which a static reading cannot resolve)."""
    workdir = TB_WORKDIR
    if not dockerfile.is_file():
        return workdir
    for line in dockerfile.read_text(errors="replace").splitlines():
        word, _, rest = line.strip().partition(" ")
        if word.upper() == "FROM":
            workdir = TB_WORKDIR
        elif word.upper() == "WORKDIR" and rest.strip() and "$" not in rest:
            workdir = str(PurePosixPath(workdir, rest.strip().strip("\"'")))
    return workdir if workdir != "/" else TB_WORKDIR


def written(lines: list[str]) -> list[str]:
    """The absolute paths that the shell commands ``lines`` write, wherever they are."""
    found: list[str] = []
    for line in lines:
        for pattern in _WRITE_TO:
            found += [m["path"] for m in pattern.finditer(line)]
        for m in _WRITE_ALL.finditer(line):
            found += [w for w in words(m["args"]) if w.startswith("/")]
        for m in _WRITE_LAST.finditer(line):
            args = words(m["args"])
            in_place = any(_IN_PLACE.fullmatch(w) for w in args)
            if args and args[-1].startswith("/") and (m["cmd"] not in ("sed", "perl") or in_place):
                found.append(args[-1])
    return found


def tests_read(tests: Path, workdir: str) -> list[str]:
    """Absolute paths the test files name outside the workspace and ``/tests`` (reason (c));
    ``/tmp`` included (``separate`` does not carry it), logs and programs' folders not."""
    if not tests.is_dir():
        return []
    found: list[str] = []
    for f in sorted(tests.rglob("*")):
        if f.is_file() and not f.is_symlink() and f.stat().st_size < 1 << 20:
            text = f.read_text(errors="replace")
            if "\0" not in text:
                found += absolute_paths("\n".join(ln for ln in text.splitlines()
                                                  if not ln.startswith("#!")))  # fmt: skip
    keep = (workdir, "/tests", "/logs", "/dev", "/proc", "/sys", *SYSTEM_PROGRAMS)
    return _unique([p for p in found if not _under(p, keep)])


def outside(path: str, workdir: str) -> bool:
    """Whether ``path`` is system state: not under the workspace, ``/tmp``, ``/logs`` or the
    kernel's (``/dev``, ``/proc``, ``/sys``)."""
    return path.startswith("/") and not _under(path, (workdir, *NOT_STATE))


def _under(path: str, roots: tuple[str, ...]) -> bool:
    path = path.rstrip("/") or "/"
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _global_pip(lines: list[str], workdir: str) -> list[str]:
    """``pip install`` commands that install outside a virtual environment of the workspace."""
    found: list[str] = []
    venv: str | None = None
    for line in lines:
        if m := _ACTIVATE.search(line):
            venv = m["venv"]
        if re.search(r"(?:^|[;&|])\s*deactivate\b", line):
            venv = None
        for m in _PIP.finditer(line):
            args = words(m["args"])
            if _pip_is_global(m["exe"], args, venv, workdir):
                found.append("pip install --user" if "--user" in args
                             else "pip install outside a venv")  # fmt: skip
    return found


def _pip_is_global(exe: str, args: list[str], venv: str | None, workdir: str) -> bool:
    if "--user" in args:
        return True
    for i, word in enumerate(args):
        name, eq, value = word.partition("=")
        if name in ("--target", "-t", "--prefix", "--root"):
            target = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            return outside(target, workdir)
    packages = {w for w in args if not w.startswith("-")}
    if packages and packages <= {"pip", "setuptools", "wheel"}:  # the installer itself
        return False
    program = exe.split()[0]
    if program.endswith("uv"):  # uv pip installs into a venv unless told --system
        return "--system" in args
    if "/" in program:  # a venv's own pip or python: the workspace's unless absolute outside
        return outside(program, workdir)
    return venv is None or outside(venv, workdir)


def _matches(patterns: list[re.Pattern[str]], lines: list[str]) -> list[str]:
    return [m.group(0) for ln in lines for p in patterns for m in p.finditer(ln)]


def _same_place(read: str, written: str) -> bool:
    """The same path, or one inside the other, neither a top-level folder (``/etc``)."""
    a, b = read.rstrip("/"), written.rstrip("/")
    if a.count("/") < 2 or b.count("/") < 2:
        return False
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _brief(text: str, limit: int = 60) -> str:
    """One printable line of at most ``limit`` characters (it goes into task.toml comments)."""
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
