"""Runs inside the verifier sandbox, as its first process: ``python3 -I -S verifier_run.py``.

Standard library only (it is copied into the sandbox, envlab is not importable there).

1. Prepares the verifier's view of ``/app``: removes bytecode (``__pycache__``, ``*.pyc``) the
   agent may have forged, and rewrites every git repository's config to keys that run no
   program (``core.fsmonitor``, hooks, pagers, filters and diff drivers are dropped).
2. Runs ``bash /tests/test.sh`` as its child and waits for it.
3. Kills every process that outlived it (in this PID namespace) and reports on the last line of
   stdout: ``ENVLAB-VERIFIER-END {json}`` with test.sh's exit status, the signal that killed
   it and the processes that outlived it (the same line as ``image_report.sh``'s; the pytest
   guard and the bash hook report on envlab's events channel, which the host reads). The host
   trusts the line only when this process itself exited 0: an agent's code that kills it
   (``kill -9 -1``) makes the grade invalid.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

END = "ENVLAB-VERIFIER-END "
# git config keys kept in the verifier's view: none of them names a program to run
_GIT_KEEP = re.compile(
    r"^(core\.(repositoryformatversion|bare|filemode|logallrefupdates|ignorecase|symlinks|"
    r"precomposeunicode|autocrlf|eol|safecrlf|abbrev|compression|bigfilethreshold)|"
    r"extensions\.(objectformat|refstorage)|remote\.[^=]*\.(url|fetch|pushurl)|branch\.[^=]*\.(remote|merge)|"
    r"user\.(name|email)|init\.defaultbranch)$",
    re.IGNORECASE,
)


def _no_dump() -> None:
    """Other processes of this uid may not read this one's memory (``/proc/PID/mem``)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4


def _is_git_dir(path: str, names: list[str]) -> bool:
    """A repository's git dir, or a linked worktree's (``commondir`` names the shared one)."""
    return "HEAD" in names and (
        "commondir" in names or os.path.isdir(os.path.join(path, "objects"))
    )


def _git_config(path: str) -> list[str]:
    """Keep only the allow-listed keys of one git config file; return the keys dropped."""
    out = subprocess.run(
        ["git", "config", "--file", path, "--no-includes", "--list", "-z"],
        capture_output=True,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1"},
        check=False,
    )
    entries = [e.split("\n", 1) for e in out.stdout.decode(errors="replace").split("\0") if e]
    kept = [(k, v[0] if v else "") for k, *v in entries if _GIT_KEEP.match(k)]
    dropped = sorted({k for k, *_ in entries if not _GIT_KEEP.match(k)})
    if out.returncode != 0:
        dropped = ["(unreadable config)"]
    os.unlink(path)  # a link is replaced by a regular file: its target is not ours to trust
    with open(path, "x") as f:
        for k, v in kept:
            section, _, rest = k.rpartition(".")
            head, _, sub = section.partition(".")
            f.write(f'[{head} "{sub}"]\n' if sub else f"[{head}]\n")
            f.write(f'\t{rest} = "{_quote(v)}"\n')
    return dropped


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prepare(root: str) -> list[dict[str, str]]:
    """Make the view of ``root`` safe to grade; return what was removed or changed."""
    changed: list[dict[str, str]] = []
    for path, dirs, files in _walk(root):
        for d in list(dirs):
            if d == "__pycache__":
                full = os.path.join(path, d)
                os.unlink(full) if os.path.islink(full) else _remove_tree(full)
                changed.append({"path": os.path.join(path, d), "kind": "bytecode"})
                dirs.remove(d)
        for name in files:
            if name.endswith((".pyc", ".pyo")):
                full = os.path.join(path, name)
                try:
                    os.unlink(full)
                except OSError:
                    continue
                changed.append({"path": full, "kind": "bytecode"})
        if _is_git_dir(path, dirs + files):
            for name in ("config", "config.worktree"):
                config = os.path.join(path, name)
                if not os.path.lexists(config) or os.path.isdir(config):
                    continue
                dropped = _git_config(config)
                if dropped:
                    entry = {"path": config, "kind": "git-config", "dropped": ",".join(dropped)}
                    changed.append(entry)
    return changed


def _walk(root: str) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk`` (top-down, ``dirs`` may be pruned) without recursion: a tree deeper than
    Python's recursion limit is walked too. Links are not followed."""
    stack = [root]
    while stack:
        path = stack.pop()
        try:
            entries = list(os.scandir(path))
        except OSError:
            continue
        dirs = [e.name for e in entries if e.is_dir(follow_symlinks=False)]
        files = [e.name for e in entries if not e.is_dir(follow_symlinks=False)]
        yield path, dirs, files
        stack += [os.path.join(path, d) for d in dirs]


def _remove_tree(path: str) -> None:
    for p, dirs, files in _bottom_up(path):
        for n in files:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(p, n))
        for n in dirs:
            full = os.path.join(p, n)
            with contextlib.suppress(OSError):
                os.unlink(full) if os.path.islink(full) else os.rmdir(full)
    with contextlib.suppress(OSError):
        os.rmdir(path)


def _bottom_up(root: str) -> list[tuple[str, list[str], list[str]]]:
    """Every directory under ``root`` (itself too), deepest first, without recursion."""
    return list(_walk(root))[::-1]


def _others() -> list[int]:
    """Live processes of this PID namespace other than its init (1) and this one: a process
    is live while any of its threads is (a leader that exited leaves the others running)."""
    me, pids = os.getpid(), []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in (1, me) and _any_thread_alive(name):
            pids.append(int(name))
    return pids


def _any_thread_alive(pid: str) -> bool:
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        if stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] not in (b"Z", b"X"):
            return True
    return False


def _kill_others() -> int:
    survivors: set[int] = set()
    for _ in range(500):
        pids = _others()
        if not pids:
            break
        survivors.update(pids)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.002)
    while True:  # reap what was re-parented to us
        try:
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                break
        except ChildProcessError:
            break
    return len(survivors)


def main() -> int:
    _no_dump()
    changed = prepare("/app")
    child = subprocess.Popen(["bash", "/tests/test.sh"], stdin=subprocess.DEVNULL)
    _, status = os.waitpid(child.pid, 0)
    stragglers = _kill_others()
    report = {
        "exit_code": os.waitstatus_to_exitcode(status),
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "stragglers": stragglers,
        "prepared": changed[:200],
        "prepared_total": len(changed),
    }
    sys.stdout.flush()
    os.write(1, ("\n" + END + json.dumps(report) + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
