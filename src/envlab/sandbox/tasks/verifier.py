"""The one verifier runner: a task's tests under envlab's reporting process, and their judge.

Every grade, whatever runtime made the sandbox (the host's filesystem, an image graded
``separate`` or ``shared``), runs the same way: the sandbox's first process is envlab's
reporting process (``verifier_run.py`` where envlab's Python runs, ``image_report.sh`` in an
image), which runs ``bash /tests/test.sh``, kills what outlived it and prints one
``ENVLAB-VERIFIER-END {json}`` line; meanwhile the pytest guard and the bash hook report on the
*events channel*, a FIFO the host reads while the tests run (what was written there cannot be
erased). ``judge`` then applies the one rule for a valid grade.

A valid grade: the reporting process ended on its own and said test.sh was not killed, no
process outlived test.sh, every pytest session that started finished, nothing blocked test.sh's
own write of the reward, and the reward files hold finite numbers. Anything else is
``GraderFailed`` (scored 0: the agent's code runs in here and may be the cause). A program the
tests need and the sandbox lacks, with a reward of 0, is ``GraderFailed`` naming it; a fetch
nothing offline could serve, ``needs the network``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import json
import os
import re
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from envlab.core.errors import GraderFailed, GraderTainted
from envlab.core.rubric import Reward
from envlab.sandbox import ExecResult, Mount, Sandbox, verifier_kit
from envlab.sandbox.tasks import offline
from envlab.sandbox.tasks.reward_file import read_reward_files

LOGS = "/logs/verifier"
REWARD_FILES = ("reward.txt", "reward.json", "rewards.json")
HOST_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.ENOMEM, errno.ENFILE,
     errno.EMFILE, errno.ENODEV, errno.ENXIO}
)  # fmt: skip
"""Setting up the verifier failed because of the host, whatever the workspace holds."""
_EVENTS_LIMIT = 1 << 20


class GradeDetails(BaseModel):
    """What a task folder's grade records beside its reward (``Reward.details``, a
    trajectory's ``info["grade"]``): one typed shape in every runtime and verifier mode."""

    model_config = ConfigDict(extra="forbid")

    sandbox_mode: Literal["host", "image"] = "host"
    verifier_mode: Literal["separate", "shared"] = "separate"
    verifier_exit_code: int | None = None
    """test.sh's exit status as its reporting process saw it; None when that process did not
    end on its own."""
    verifier_duration_s: float = 0.0
    verifier_output_tail: str = ""
    not_carried: list[dict[str, str]] = Field(default_factory=list)
    """What did not reach the verifier from the agent's workspace (links, special files,
    bytecode, git programs, Python environments and hooks), each with why."""
    needs_network: list[str] = Field(default_factory=list)
    """What the tests fetched and offline grading could not serve."""
    missing_tools: list[str] = Field(default_factory=list)
    """Programs the tests called that the sandbox lacks."""
    grader_tainted: list[str] = Field(default_factory=list)
    """The shared mode: files of the agent's the grade used, outside what the task expects."""

    def record(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class EventsChannel:
    """A FIFO at ``path`` (on the host) that the running event loop reads until ``close``: the
    verifier's processes write lines on it (``start PID``, ``finish PID CODE``, ``missing
    TOOL``). Read on readiness (``loop.add_reader``): no thread, and ``close`` never waits (a
    thread polling with a timeout made every grade block the loop until its next poll)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        os.mkfifo(path, 0o666)
        os.chmod(path, 0o666)  # the host mode's verifier runs as another uid
        self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        self._keep = os.open(path, os.O_WRONLY)  # no EOF between two writers
        self._chunks: list[bytes] = []
        self._size = 0
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._fd, self._drain)

    def _drain(self) -> None:
        """Read what is there, 1 MiB at most a call (a writer that never stops must not hold
        the loop: the verifier's own timeout runs on it); past the limit, read and drop it (a
        full FIFO would block the verifier's writers, an unread one wake the loop at once)."""
        for _ in range(16):
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return
            if not data:
                return
            if self._size < _EVENTS_LIMIT:
                self._chunks.append(data)
                self._size += len(data)

    def close(self) -> str:
        """Stop reading; everything written so far (at most 1 MiB)."""
        self._loop.remove_reader(self._fd)
        self._drain()
        for fd in (self._fd, self._keep):
            with contextlib.suppress(OSError):
                os.close(fd)
        return b"".join(self._chunks).decode(errors="replace")


async def run_tests(
    box: Sandbox,
    argv: Sequence[str],
    *,
    timeout: float,
    logs: Path,
    events: Path,
    mounts: Sequence[Mount] = (),
    env: dict[str, str] | None = None,
    needs_network: Path | None = None,
    details: GradeDetails | None = None,
) -> Reward:
    """Run the reporting process ``argv`` in ``box`` with the events channel at ``events``
    (bind-mounted at ``verifier_kit.EVENTS`` unless ``env`` names another place, as in a
    shared sandbox, where the FIFO is made inside a directory the sandbox already has)."""
    channel = EventsChannel(events)
    extra = [] if env and "ENVLAB_EVENTS" in env else [Mount(events, verifier_kit.EVENTS, True)]
    try:
        res = await box.exec(list(argv), timeout=timeout, mounts=[*mounts, *extra], env=env)
    finally:
        text = channel.close()
    return judge(res, text, logs, timeout, needs_network=needs_network, details=details)


def end_report(res: ExecResult) -> tuple[dict[str, Any] | None, str]:
    """The report the reporting process printed last, if it ended on its own, and test.sh's
    output before it."""
    if res.exit_code != 0 or res.timed_out:
        return None, res.stdout
    out, sep, line = res.stdout.rstrip("\n").rpartition("\n" + verifier_kit.END)
    if not sep:
        return None, res.stdout
    with contextlib.suppress(json.JSONDecodeError, RecursionError):  # too deep: no report
        report = json.loads(line)
        if isinstance(report, dict):
            return report, out
    return None, res.stdout


class Events(NamedTuple):
    """What the verifier's processes reported on the events channel."""

    unfinished: list[str]
    """pytest sessions that started and never finished."""
    missing: list[str]
    """Programs reported missing."""
    tainted: list[str]
    """pytest sessions whose own code was changed while the tests ran (``tainted PID WHAT``)."""


def parse_events(text: str) -> Events:
    started, finished, missing, tainted = set(), set(), [], []
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        pid = rest.split(" ")[0]
        if kind == "start":
            started.add(pid)
        elif kind == "finish":
            finished.add(pid)
        elif kind == "missing" and rest and rest[:100] not in missing:
            missing.append(rest[:100])
        elif kind == "tainted" and len(tainted) < 20:
            tainted.append("pytest: " + rest.partition(" ")[2][:300])
    return Events(sorted(started - finished), missing[:20], tainted)


def _unpack(files: dict[str, Any], logs: Path) -> None:
    """The reward files a reporting process carried on its line (base64) into ``logs``."""
    for name in REWARD_FILES:
        data = files.get(name)
        if isinstance(data, str):
            with contextlib.suppress(ValueError):
                (logs / name).write_bytes(base64.b64decode(data, validate=True)[:65536])


def logs_problems(logs: Path) -> list[str]:
    """Ways test.sh's own write of the reward may have been blocked: a reward file made
    read-only or not a regular file, the disk under it full."""
    problems = []
    for name in REWARD_FILES:
        try:
            st = os.lstat(logs / name)
        except FileNotFoundError:
            continue
        except OSError as e:
            problems.append(f"{name}: {e.strerror}")
            continue
        if not stat.S_ISREG(st.st_mode):
            problems.append(f"{name} is not a regular file")
        elif not st.st_mode & stat.S_IWUSR:
            problems.append(f"{name} was made read-only (mode {stat.S_IMODE(st.st_mode):o})")
    try:
        vfs = os.statvfs(logs)
    except OSError as e:
        return [*problems, f"{LOGS}: {e.strerror}"]
    if vfs.f_bavail * vfs.f_frsize < 1 << 20 or (vfs.f_files and vfs.f_favail == 0):
        problems.append("the verifier's disk was full, so writes of test.sh may have failed")
    return problems


def _invalid(res: ExecResult, report: dict[str, Any] | None, unfinished: list[str]) -> str:
    if report is None:
        if "cannot change to directory" in res.stderr:
            return "the working directory is gone from the workspace; tests/test.sh could not start"
        return (
            f"the verifier was killed before it finished (exit {res.exit_code}): something in "
            "the sandbox killed its reporting process"
        )
    if report.get("signal"):
        return f"tests/test.sh was killed by signal {report['signal']}"
    if report.get("stragglers"):
        return (
            f"{report['stragglers']} process(es) started by the tests were still running when "
            "tests/test.sh ended (they could rewrite the reward); the tests must stop them"
        )
    if unfinished:
        return (
            "a pytest session ended before it finished (os._exit or a kill in the code under "
            "test), whatever exit code it left"
        )
    return ""


_NO_PYTEST = re.compile(r"No module named '?pytest'?|pytest: (command )?not found")


def judge(
    res: ExecResult,
    events: str,
    logs: Path,
    timeout: float,
    *,
    needs_network: Path | None = None,
    details: GradeDetails | None = None,
) -> Reward:
    """The valid reward of one run of the reporting process, or ``GraderFailed`` saying why."""
    report, out = end_report(res)
    if report and isinstance(report.get("files"), dict):
        _unpack(report["files"], logs)
    exit_code = report.get("exit_code") if report else None
    d = (details or GradeDetails()).model_copy(deep=True)
    d.verifier_exit_code = exit_code if isinstance(exit_code, int) else None
    d.verifier_duration_s = round(res.duration_s, 3)
    d.verifier_output_tail = (out[-3000:] + "\n" + res.stderr[-3000:]).strip()
    if report and isinstance(report.get("prepared"), list):
        prepared = [
            {k: str(v) for k, v in p.items()} for p in report["prepared"] if isinstance(p, dict)
        ]
        d.not_carried = [*d.not_carried, *prepared][:200]
    unfinished, missing, tainted = parse_events(events)
    if tainted and not res.timed_out:
        d.grader_tainted = tainted
        raise GraderTainted(
            "the code under test changed pytest's own code while the tests ran (its outcomes "
            f"cannot be trusted): {tainted[0]}",
            details=d.record(),
        )
    needs = offline.read_needs_network(needs_network) if needs_network else []
    why = "" if res.timed_out else _invalid(res, report, unfinished)
    problems = [] if why or res.timed_out else logs_problems(logs)
    if problems:
        why = "the reward may not be test.sh's: " + "; ".join(problems)
    total: float | None = None
    read_error = ""
    if not why and not res.timed_out and not needs:
        try:
            total, components = read_reward_files(logs)
        except GraderFailed as e:
            read_error = str(e)
    if not why and not needs and (total is None or total <= 0):
        # a fetch that went past the offline shims and failed: a grade stands only where the
        # tests passed anyway; a test runner that is not there, named
        text = res.stdout + "\n" + res.stderr
        needs = offline_misses(text) if needs_network else []
        if _NO_PYTEST.search(text) and "pytest" not in missing:
            missing.append("pytest")
    if needs:
        d.needs_network = needs
        why = f"needs the network ({', '.join(needs[:5])}): grading is offline"
    elif res.timed_out:
        why = f"the verifier (tests/test.sh) ran past [verifier] timeout_sec = {timeout:g}s"
    elif not why and missing and (total is None or total <= 0):
        d.missing_tools = missing
        why = f"the verifier needs {', '.join(missing)}, not installed in the sandbox"
    elif not why and total is not None:
        return Reward(total=total, components=components, details=d.record())
    why = why or read_error
    tail = d.verifier_output_tail[-1500:]
    raise GraderFailed(
        f"{why} (test.sh exit code {d.verifier_exit_code}). Output tail:\n{tail}",
        details=d.record(),
    )


_MISSES = (
    (re.compile(r"No matching distribution found for ([\w.\-\[\],=<>!~]+)"), "pip: {}"),
    (re.compile(r"Because ([\w.\-\[\]]+) was not found in the cache"), "uv: {}"),
    (re.compile(r"Failed to fetch: `(\S+)`"), "{}"),
    (re.compile(r"Could not resolve host:? '?([\w.-]+)"), "https://{}"),
    (re.compile(r"(?:getaddrinfo|resolve|connect)[^\n]*?(?:host|to) '?([\w-]+\.[\w.-]+)"), "{}"),
)
_APT_NOISE = ("Err:", "W:", "Ign:", "E: Failed to fetch", "E: Some index files")


def offline_misses(output: str) -> list[str]:
    """What the tests tried to fetch and could not, read off their output (pip's, uv's, curl's
    and resolvers' messages); apt's failed index updates are expected offline and ignored."""
    found: list[str] = []
    for line in output.splitlines():
        if line.lstrip().startswith(_APT_NOISE):
            continue
        for pattern, form in _MISSES:
            for m in pattern.finditer(line):
                what = form.format(m.group(1).rstrip("`'\".,:"))
                if what not in found:
                    found.append(what)
    return found[:20]
