"""The host mode's verifier sandbox: Harbor's separate mode on the host's filesystem.

The verifier sandbox sees the agent's final workspace at ``/app`` (its processes are all dead
by then), the task's pristine ``tests/`` read-only at ``/tests``, ``/logs/verifier`` for the
reward, and envlab's kit read-only at ``/opt/envlab`` (see :mod:`.kit`). Its first process,
``verifier_run.py``, strips bytecode and program-running git settings from the view of ``/app``,
runs ``bash /tests/test.sh``, kills what outlived it and reports how test.sh ended. Every python
runs with safe-path semantics (``PYTHONSAFEPATH=1``) and writes no bytecode; ``pytest`` runs
with a session guard and ``-p no:cacheprovider --rootdir=/tests --confcutdir=/tests``.

The tests run and are judged by the one verifier runner (``verifier.run_tests``): the rule for a
valid grade is there. ``InfraError`` only when the machinery failed (the sandbox could not
start, the host could not set up the view).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from envlab.core.errors import GraderFailed, InfraError
from envlab.core.rubric import Reward
from envlab.sandbox import BubblewrapSandbox, Limits, Mount, scratch_dir
from envlab.sandbox import verifier_kit as kit
from envlab.sandbox.layout import host_layout
from envlab.sandbox.tasks.host_build import PreparedWorkspace
from envlab.sandbox.tasks.source import TaskSource
from envlab.sandbox.tasks.verifier import HOST_ERRNOS, LOGS, GradeDetails, run_tests
from envlab.sandbox.workspace import state_dir

# variables a task's env may not set for the verifier: they would change which programs run
_DENY_EXACT = {"PATH", "HOME", "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "IFS", "CDPATH"}
_DENY_PREFIX = ("LD_", "PYTHON", "PYTEST", "PERL5", "RUBY", "NODE_OPTIONS", "JAVA_TOOL_OPTIONS")
_DENY_PREFIX += ("GIT_", "ENVLAB_")
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
        if e.errno in HOST_ERRNOS:  # the host, not the agent: out of space, a dead device
            raise InfraError(f"could not set up the verifier's sandbox: {e}") from e
        # anything else comes from what the agent left (a path too long to walk, ...)
        raise GraderFailed(f"the agent's workspace could not be prepared for grading: {e}") from e
    try:
        logs, report = await asyncio.to_thread(_logs_dir, box)
        python = host_layout(state_dir()).python_bin
        return await run_tests(
            box, [python, "-I", "-S", f"{kit.LIB}/verifier_run.py"], timeout=timeout,
            logs=logs, events=report / "events", mounts=[Mount(logs, LOGS, writable=True)],
            details=GradeDetails(sandbox_mode="host"),
        )  # fmt: skip
    finally:
        await box.close()


def _logs_dir(box: BubblewrapSandbox) -> tuple[Path, Path]:
    """``/logs/verifier`` on the verifier's own bounded storage (code under test that fills it
    fills only that), owned by root and open to the sandbox's uid: it cannot be made read-only
    from inside, so test.sh's own write of the reward cannot be locked out; and a directory of
    the host's for the events channel."""
    if box.storage is not None:
        logs, report = box.storage.make("logs", "report")
    else:
        logs, report = scratch_dir("verify-logs-"), scratch_dir("verify-report-")
    logs.chmod(0o777)  # not a sticky /tmp: one uid writes here
    return logs, report
