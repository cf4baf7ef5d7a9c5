"""``HostRuntime``: a task on the host's filesystem (no image).

The workspace ``/app`` is built once per content (``host_build``) and copied into a fresh
sandbox of the chosen backend per episode; the system directories are the host's, read-only.
Grading kills every process of the agent, scrubs the frozen workspace of what the agent's
sandbox could not see (links out of it, FIFOs, sockets, devices) and runs the tests in a
separate sandbox over it (``host_verifier``): Harbor's ``separate`` mode on the host.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from envlab.core.errors import GraderFailed
from envlab.core.rubric import Reward
from envlab.sandbox import Limits, Sandbox, SandboxError, backend, scrub_tree
from envlab.sandbox.tasks.host_build import PreparedWorkspace, prepare_workspace
from envlab.sandbox.tasks.host_verifier import run_verifier
from envlab.sandbox.tasks.source import TaskSource


class HostRuntime:
    """Build one with ``await HostRuntime.prepare(task, reason, backend)``."""

    mode = "host"
    verifier_mode = "separate"

    def __init__(
        self, task: TaskSource, prepared: PreparedWorkspace, reason: str, backend_name: str
    ) -> None:
        self.task, self.prepared, self.reason = task, prepared, reason
        self.backend_name = backend_name
        self.notes = [f"mode: host ({reason})", *prepared.notes]
        self.env = dict(prepared.env)
        self._scrubbed: list[dict[str, str]] = []

    @classmethod
    async def prepare(cls, task: TaskSource, reason: str, backend_name: str) -> HostRuntime:
        try:
            prepared = await prepare_workspace(task)
        except OSError as e:  # the host's: no space, I/O
            raise SandboxError(f"could not set up the workspace of task {task.name!r}: {e}") from e
        return cls(task, prepared, reason, backend_name)

    async def open(self, limits: Limits, name: str) -> Sandbox:
        try:
            return await backend(self.backend_name).create(
                self.prepared.app_dir,
                limits=limits,
                network=self.task.config.network_for("agent"),
                env={**self.prepared.env, **self.task.config.environment.env},
                workdir=self.prepared.workdir,
                name=name,
            )
        except OSError as e:
            raise SandboxError(
                f"could not set up the workspace of task {self.task.name!r}: {e}"
            ) from e

    async def grade(self, box: Sandbox) -> Reward:
        await box.kill_all()  # every process of the agent is gone; no command can start
        # what the agent's sandbox could not see is not carried into the verifier's: links out
        # of the workspace (into /tests, /dev, /proc) or dangling, FIFOs, sockets, devices
        self._scrubbed += await asyncio.to_thread(scrub_tree, box.host_workdir)
        scrubbed = self._scrubbed
        cfg = self.task.config.environment
        try:
            reward = await run_verifier(
                self.task,
                box.host_workdir,
                self.prepared,
                memory_mb=cfg.memory_mb or 4096,
                network=self.task.config.network_for("verifier"),
            )
        except GraderFailed as e:
            _record(e.details, scrubbed)
            raise
        _record(reward.details, scrubbed)
        return reward

    def state(self) -> dict[str, Any]:
        return {
            "workspace_at_reset": self.prepared.digest,
            "sandbox_mode": "host",
            "host_mode_because": self.reason,
            "verifier_mode": self.verifier_mode,
        }

    async def workspace_view(self) -> Path:
        return self.prepared.app_dir


def _record(details: dict[str, Any], scrubbed: list[dict[str, str]]) -> None:
    if scrubbed:
        not_carried = [*scrubbed, *details.get("not_carried", [])]
        details["not_carried"] = not_carried[:200]
