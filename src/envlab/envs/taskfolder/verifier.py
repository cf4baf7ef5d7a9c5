"""Grading after the episode, in a separate sandbox the agent never had access to.

The verifier sandbox sees a copy of the agent's final workspace at ``/app`` (its processes are
all dead by then), a pristine copy of the task's ``tests/`` at ``/tests``, and
``/logs/verifier`` that only it can write. It runs ``bash /tests/test.sh`` from the workdir with
a fixed PATH and a sanitized environment. ``python3`` there has ``pytest`` importable and never
puts the working directory on ``sys.path`` for ``-c``/``-m`` (so a ``pytest.py`` or ``json.py``
planted in ``/app`` is not imported); ``pytest`` runs with
``-p no:cacheprovider --rootdir=/tests --confcutdir=/tests``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import os
import shutil
import stat
import tempfile
from pathlib import Path

from envlab.core.errors import InfraError
from envlab.core.rubric import Reward
from envlab.envs.taskfolder.build import PreparedWorkspace
from envlab.envs.taskfolder.model import TaskFolder
from envlab.sandbox import BubblewrapSandbox, ExecResult, Limits, Mount
from envlab.sandbox.layout import host_layout
from envlab.sandbox.workspace import copy_tree, state_dir

LOGS = "/logs/verifier"
WRAPPERS = "/opt/envlab/bin"
REWARD_FILES = ("reward.json", "rewards.json", "reward.txt")
_MAX_REWARD_BYTES = 64 << 10

# variables a task's env may not set for the verifier: they would change which programs run
_DENY_EXACT = {"PATH", "HOME", "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "IFS", "CDPATH"}
_DENY_PREFIX = ("LD_", "PYTHON", "PYTEST", "PERL5", "RUBY", "NODE_OPTIONS", "JAVA_TOOL_OPTIONS")

_PYTHON_WRAPPER = """#!/bin/sh
# envlab verifier: python3 that never puts the working directory (/app) on sys.path for
# -c, -m or stdin, so modules planted by the agent cannot shadow pytest or the stdlib.
for arg in "$@"; do
  case "$arg" in
    -W|-X) skip=1; continue ;;
  esac
  if [ -n "$skip" ]; then skip=; continue; fi
  case "$arg" in
    -c*|-m*|-) exec {python} -P "$@" ;;
    --*) continue ;;
    -*c*|-*m*) exec {python} -P "$@" ;;  # combined flags: -Bm pytest, -Ic '...'
    -*) continue ;;
    *) exec {python} "$@" ;;
  esac
done
exec {python} -P "$@"
"""
_PYTEST_WRAPPER = """#!/bin/sh
exec {python} -P -m pytest "$@"
"""


def _wrappers() -> Path:
    """``python3``, ``python`` and ``pytest`` for the verifier's PATH (written once)."""
    python = host_layout(state_dir()).python_bin
    digest = hashlib.sha256((_PYTHON_WRAPPER + _PYTEST_WRAPPER + python).encode()).hexdigest()
    d = state_dir() / f"verifier-bin-{digest[:12]}"
    if d.is_dir():
        return d
    tmp = Path(tempfile.mkdtemp(prefix="verifier-bin-", dir=state_dir()))
    for name, text in (
        ("python3", _PYTHON_WRAPPER),
        ("python", _PYTHON_WRAPPER),
        ("pytest", _PYTEST_WRAPPER),
    ):
        (tmp / name).write_text(text.format(python=python))
        (tmp / name).chmod(0o755)
    tmp.chmod(0o755)
    try:
        tmp.rename(d)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return d


def verifier_env(task: TaskFolder, prepared: PreparedWorkspace) -> dict[str, str]:
    task_env = {**prepared.env, **task.config.environment.env, **task.config.verifier.env}
    clean = {
        k: v for k, v in task_env.items() if k not in _DENY_EXACT and not k.startswith(_DENY_PREFIX)
    }
    return {
        **clean,
        "PATH": f"{WRAPPERS}:{host_layout(state_dir()).path}",
        "HOME": "/tmp",
        "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTEST_ADDOPTS": "-p no:cacheprovider --rootdir=/tests --confcutdir=/tests",
    }


async def run_verifier(
    task: TaskFolder, workspace: Path, prepared: PreparedWorkspace, *, memory_mb: int = 4096
) -> Reward:
    """Run the task's tests against a copy of the frozen ``workspace``; return the reward they
    wrote, or raise ``InfraError``. The workspace itself is left as the agent left it, so that
    grading again (``regrade``) sees the same state."""
    timeout = task.config.verifier.timeout_sec
    root = Path(tempfile.mkdtemp(prefix="verify-", dir=state_dir()))
    try:
        app, tests, logs = root / "app", root / "tests", root / "logs"
        # links are copied as links, FIFOs and other special files are left out
        await asyncio.to_thread(copy_tree, workspace, app)
        shutil.copytree(task.tests_dir, tests, symlinks=True)
        logs.mkdir()
        box = BubblewrapSandbox(
            app_dir=app,
            mounts=[
                Mount(tests, "/tests", writable=True),
                Mount(logs, LOGS, writable=True),
                Mount(_wrappers(), WRAPPERS),
            ],
            env=verifier_env(task, prepared),
            workdir=prepared.workdir,
            limits=Limits(timeout_s=timeout, memory_bytes=memory_mb << 20),
            name=f"verifier-{task.name}",
        )
        try:
            await asyncio.to_thread(box.prepare)
            res = await box.exec(["bash", "/tests/test.sh"], timeout=timeout)
        finally:
            await box.close()
        return read_reward(logs, res, timeout)
    finally:
        await asyncio.to_thread(shutil.rmtree, root, True)


def _read_small(path: Path) -> str | None:
    """The file's text, never following a link, never more than 64 KiB; None if absent."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise InfraError(f"verifier wrote an unreadable {path.name} ({e})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InfraError(f"verifier's {path.name} is not a regular file")
        data = os.read(fd, _MAX_REWARD_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > _MAX_REWARD_BYTES:
        raise InfraError(f"verifier's {path.name} is larger than {_MAX_REWARD_BYTES} bytes")
    return data.decode(errors="replace")


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InfraError(f"{where} is {value!r}, not a number")
    x = float(value)
    if not math.isfinite(x):
        raise InfraError(f"{where} is {value!r}, not a finite number")
    return x


def read_reward(logs: Path, res: ExecResult, timeout: float) -> Reward:
    """The reward in ``logs``: ``reward.json``/``rewards.json`` (named components; ``reward`` or
    their mean is the total) and/or ``reward.txt`` (the total)."""
    details = {
        "verifier_exit_code": res.exit_code,
        "verifier_duration_s": round(res.duration_s, 3),
        "verifier_output_tail": (res.stdout[-2000:] + res.stderr[-2000:]).strip(),
    }
    if res.timed_out:
        raise InfraError(
            f"the verifier (tests/test.sh) took longer than [verifier] timeout_sec = {timeout}s "
            "and was killed; raise the timeout in task.toml if the tests need longer"
        )
    components: dict[str, float] = {}
    total: float | None = None
    for name in ("reward.json", "rewards.json"):
        text = _read_small(logs / name)
        if text is None:
            continue
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise InfraError(
                f"/logs/verifier/{name} is not valid JSON ({e}): {text[:200]!r}"
            ) from None
        if isinstance(data, int | float) and not isinstance(data, bool):
            total = _number(data, f"/logs/verifier/{name}")
            continue
        if not isinstance(data, dict) or not data:
            raise InfraError(f"/logs/verifier/{name} must be a non-empty object of numbers")
        for k, v in data.items():
            components[str(k)] = _number(v, f"/logs/verifier/{name}[{k!r}]")
        total = components.get("reward", sum(components.values()) / len(components))
    text = _read_small(logs / "reward.txt")
    if text is not None:
        if not text.strip():
            raise InfraError("the verifier wrote an empty /logs/verifier/reward.txt")
        try:
            total = _number(float(text.strip()), "/logs/verifier/reward.txt")
        except ValueError:
            raise InfraError(
                f"/logs/verifier/reward.txt holds {text.strip()[:100]!r}, not a number"
            ) from None
    if total is None:
        tail = details["verifier_output_tail"]
        raise InfraError(
            "the verifier wrote no reward: /logs/verifier/reward.txt and reward.json are missing "
            f"(tests/test.sh exited with code {res.exit_code}). Output tail:\n{str(tail)[-1500:]}"
        )
    with contextlib.suppress(ValueError):
        details["reward_files"] = sorted(p.name for p in logs.iterdir())
    return Reward(total=total, components=components, details=details)
