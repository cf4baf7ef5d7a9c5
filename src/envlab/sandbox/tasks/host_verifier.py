"""Grading after the episode, in a separate sandbox the agent never had access to.

The verifier sandbox sees the agent's final workspace at ``/app`` (its processes are all dead
by then), the task's pristine ``tests/`` read-only at ``/tests``, ``/logs/verifier`` for the
reward, and envlab's kit read-only at ``/opt/envlab`` (see :mod:`.kit`). Its first process,
``verifier_run.py``, strips bytecode and program-running git settings from the view of ``/app``,
runs ``bash /tests/test.sh``, kills what outlived it and reports how test.sh ended. Every python
runs with safe-path semantics (``PYTHONSAFEPATH=1``) and writes no bytecode; ``pytest`` runs
with a session guard and ``-p no:cacheprovider --rootdir=/tests --confcutdir=/tests``.

The one rule for a valid grade: test.sh ended on its own (no signal, within its timeout, the
reporting process alive), every pytest session it started finished, and the reward files hold
finite numbers. Anything else is ``GraderFailed`` (the agent's code runs in here, so it may be
the cause); ``InfraError`` only when the machinery failed (the sandbox could not start, the host
could not set up the view).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
from pathlib import Path
from typing import Any

from envlab.core.errors import GraderFailed, InfraError
from envlab.core.rubric import Reward
from envlab.sandbox import BubblewrapSandbox, ExecResult, Limits, Mount, scratch_dir
from envlab.sandbox import verifier_kit as kit
from envlab.sandbox.layout import host_layout
from envlab.sandbox.tasks.host_build import PreparedWorkspace
from envlab.sandbox.tasks.reward_file import read_reward_files
from envlab.sandbox.tasks.source import TaskSource
from envlab.sandbox.workspace import state_dir

LOGS = "/logs/verifier"

# variables a task's env may not set for the verifier: they would change which programs run
_DENY_EXACT = {"PATH", "HOME", "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "IFS", "CDPATH"}
_DENY_PREFIX = ("LD_", "PYTHON", "PYTEST", "PERL5", "RUBY", "NODE_OPTIONS", "JAVA_TOOL_OPTIONS")
_DENY_PREFIX += ("GIT_", "ENVLAB_")
# setting up the verifier failed because of the host, whatever the workspace holds
_HOST_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.ENOMEM, errno.ENFILE,
     errno.EMFILE, errno.ENODEV, errno.ENXIO}
)  # fmt: skip
# git, however it is called, runs no program named by a repository's config (the view of /app
# has its configs rewritten too; these take command-line precedence over what remains)
_GIT_SAFE = {
    "core.fsmonitor": "false",
    "core.hooksPath": "/dev/null",
    "core.pager": "cat",
    "core.editor": "true",
    "core.sshCommand": "false",
    "core.askPass": "",
    "credential.helper": "",
    "safe.directory": "*",
}


def verifier_env(task: TaskSource, prepared: PreparedWorkspace) -> dict[str, str]:
    task_env = {**prepared.env, **task.config.environment.env, **task.config.verifier.env}
    clean = {
        k: v for k, v in task_env.items() if k not in _DENY_EXACT and not k.startswith(_DENY_PREFIX)
    }
    git = {"GIT_CONFIG_COUNT": str(len(_GIT_SAFE)), "GIT_CONFIG_NOSYSTEM": "1"}
    for i, (k, v) in enumerate(_GIT_SAFE.items()):
        git |= {f"GIT_CONFIG_KEY_{i}": k, f"GIT_CONFIG_VALUE_{i}": v}
    return {
        **clean,
        **git,
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "PATH": f"{kit.BIN}:{host_layout(state_dir()).path}",
        "HOME": "/tmp",
        "BASH_ENV": f"{kit.LIB}/bash_env.sh",
        "PYTHONNOUSERSITE": "1",
        "PYTHONSAFEPATH": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTEST_ADDOPTS": "-p no:cacheprovider --rootdir=/tests --confcutdir=/tests",
    }


async def run_verifier(
    task: TaskSource,
    workspace: Path,
    prepared: PreparedWorkspace,
    *,
    memory_mb: int = 4096,
    network: bool = False,
) -> Reward:
    """Run the task's tests against the frozen ``workspace``; return the reward they wrote.
    ``GraderFailed`` when the grade is not valid, ``InfraError`` when the machinery failed.
    The workspace itself is left as the agent left it: grading again sees the same state."""
    timeout = task.config.verifier.timeout_sec
    storage_mb = task.config.environment.storage_mb
    # no copy: /app is an overlay on the frozen workspace, the verifier's writes go to a
    # bounded layer of its own and vanish with it (grading again sees the same state)
    try:
        kit_dir = await asyncio.to_thread(kit.kit_dir)
        box = await BubblewrapSandbox.create(
            app_dir=workspace,
            app_overlay=True,
            mounts=[Mount(task.tests_dir, "/tests"), Mount(kit_dir, kit.MOUNT)],
            env=verifier_env(task, prepared),
            network=network,
            workdir=prepared.workdir,
            limits=Limits(
                timeout_s=timeout,
                memory_bytes=memory_mb << 20,
                # the task's storage_mb bounds the verifier's writes too (else the overlay's)
                **({"storage_bytes": storage_mb << 20} if storage_mb else {}),
            ),
            name=f"verifier-{task.name}",
        )
    except OSError as e:
        if e.errno in _HOST_ERRNOS:  # the host, not the agent: out of space, a dead device
            raise InfraError(f"could not set up the verifier's sandbox: {e}") from e
        # anything else comes from what the agent left (a path too long to walk, ...)
        raise GraderFailed(f"the agent's workspace could not be prepared for grading: {e}") from e
    try:
        logs = await asyncio.to_thread(_logs_dir, box)
        python = host_layout(state_dir()).python_bin
        argv = [python, "-I", "-S", f"{kit.LIB}/verifier_run.py"]
        res = await box.exec(argv, timeout=timeout, mounts=[Mount(logs, LOGS, writable=True)])
        return judge(res, logs, timeout)
    finally:
        await box.close()


def _logs_dir(box: BubblewrapSandbox) -> Path:
    """``/logs/verifier`` on the verifier's own bounded storage (code under test that fills it
    fills only that), owned by root and open to the sandbox's uid: it cannot be made read-only
    from inside, so test.sh's own write of the reward cannot be locked out."""
    if box.storage is not None:
        (logs,) = box.storage.make("logs")
    else:
        logs = scratch_dir("verify-logs-")
    logs.chmod(0o777)  # not a sticky /tmp: one uid writes here
    return logs


def _end_report(res: ExecResult) -> tuple[dict[str, Any] | None, str]:
    """The report ``verifier_run.py`` printed last, if it ended on its own, and test.sh's
    output before it."""
    if res.exit_code != 0 or res.timed_out:
        return None, res.stdout
    out, sep, line = res.stdout.rstrip("\n").rpartition("\n" + kit.END)
    if not sep:
        return None, res.stdout
    with contextlib.suppress(json.JSONDecodeError, RecursionError):  # too deep: no report
        report = json.loads(line)
        if isinstance(report, dict):
            return report, out
    return None, res.stdout


def judge(res: ExecResult, logs: Path, timeout: float) -> Reward:
    """The valid reward of one verifier run, or ``GraderFailed`` saying why there is none."""
    report, out = _end_report(res)
    details: dict[str, Any] = {
        "verifier_exit_code": report["exit_code"] if report else None,
        "sandbox_mode": "host",
        "verifier_mode": "separate",
        "verifier_duration_s": round(res.duration_s, 3),
        "verifier_output_tail": (out[-2000:] + res.stderr[-2000:]).strip(),
    }
    if report:
        details["not_carried"] = report.get("prepared", [])
    why = _invalid(res, report, timeout)
    if why is None:
        try:
            total, components = read_reward_files(logs)
        except GraderFailed as e:
            why = str(e)
        else:
            missing = report.get("missing_tools") if report else None
            if missing and total <= 0:
                why = f"the verifier needs {', '.join(missing)}, not installed in the sandbox"
            else:
                return Reward(total=total, components=components, details=details)
    tail = str(details["verifier_output_tail"])[-1500:]
    raise GraderFailed(
        f"{why} (test.sh exit code {details['verifier_exit_code']}). Output tail:\n{tail}",
        details=details,
    )


def _invalid(res: ExecResult, report: dict[str, Any] | None, timeout: float) -> str | None:
    if res.timed_out:
        return (
            f"the verifier (tests/test.sh) ran past [verifier] timeout_sec = {timeout:g}s and "
            "was killed"
        )
    if report is None:
        if "cannot change to directory" in res.stderr:
            return "the working directory is gone from the workspace; tests/test.sh could not start"
        return (
            f"the verifier was killed before it finished (exit {res.exit_code}): something in "
            "the sandbox killed its processes"
        )
    if report.get("signal"):
        return f"tests/test.sh was killed by signal {report['signal']}"
    if report.get("unfinished_pytest"):
        return (
            "a pytest session ended before it finished (os._exit or a kill in the code under "
            "test), whatever exit code it left"
        )
    if report.get("logs_problems"):
        return "the reward may not be test.sh's: " + "; ".join(report["logs_problems"])
    if report.get("stragglers"):
        return (
            f"{report['stragglers']} process(es) started by the tests were still running when "
            "tests/test.sh ended (they could rewrite the reward); the tests must stop them"
        )
    return None
