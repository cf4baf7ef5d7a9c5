"""``TerminalEpisode``: one episode on a task folder. The agent works in a fresh sandbox
through ``run``, ``read_file``, ``write_file`` and ``submit``; the grade comes from the task's
tests, run after the agent stopped, in a separate verifier sandbox.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from envlab.core import (
    Action,
    ConfigError,
    EpisodeOrderError,
    Reward,
    Rubric,
    Task,
    ToolCall,
    ToolCallError,
    ToolEnv,
    ToolResult,
    tool,
)
from envlab.envs.taskfolder.model import TaskFolder
from envlab.sandbox import (
    ExecResult,
    Limits,
    Mount,
    Sandbox,
    SandboxFileError,
    copy_tree,
    scratch_dir,
)
from envlab.sandbox.limits import STORAGE_BYTES
from envlab.sandbox.tasks.runtime import TaskRuntime, prepare_runtime

if TYPE_CHECKING:
    from envlab.envs.taskfolder.spec import TerminalEnv

SHOWN_OUTPUT = 16_000
"""Characters of stdout and of stderr a tool result shows (head and tail)."""
ORACLE_TOOL = "run_solution"

SYSTEM_PROMPT = """You are working in a Linux sandbox on the task below. Your workspace is /app.
Tools: run(command) runs a bash command there (each command starts in the task's working
directory; a process you start in the background ends when its command ends), read_file and
write_file read and write files, submit() ends the episode. There is no network access.
Call submit() when you are done; your work is then checked by tests you cannot see."""


def clip(text: str, limit: int = SHOWN_OUTPUT) -> str:
    if len(text) <= limit:
        return text
    head, tail = text[: limit * 3 // 4], text[-(limit // 4) :]
    return f"{head}\n[... {len(text) - len(head) - len(tail)} characters omitted ...]\n{tail}"


def describe(res: ExecResult, timeout: float) -> str:
    lines = [f"exit code: {res.exit_code}"]
    if res.timed_out:
        lines[0] += f" (timed out after {timeout:g}s; every process of the command was killed)"
    if res.stdout:
        lines.append("stdout:\n" + clip(res.stdout))
    if res.stderr:
        lines.append("stderr:\n" + clip(res.stderr))
    return "\n".join(lines)


def sandbox_limits(folder: TaskFolder) -> Limits:
    """What the agent's sandbox may use: ``[environment]`` memory (default 4 GiB) and storage
    (``storage_mb`` bounds the whole workspace, a filesystem of its own, not one file; without
    it ``STORAGE_BYTES``, in every runtime: the host's disk is not the agent's to fill)."""
    cfg = folder.config.environment
    return Limits(
        memory_bytes=(cfg.memory_mb or 4096) << 20,
        storage_bytes=(cfg.storage_mb << 20) if cfg.storage_mb else STORAGE_BYTES,
    )


class TerminalEpisode(ToolEnv):
    """One episode of a task folder of a ``TerminalEnv`` spec.

    ``reset`` builds the task's workspace (once per content hash, then cached) and copies it
    into a fresh sandbox of the spec's backend. ``grade()`` kills every process of that
    sandbox, then runs ``tests/test.sh`` in a separate verifier sandbox; a reward that is not
    valid raises ``GraderFailed``, a failure of the grading machinery ``InfraError``.
    """

    rubric: ClassVar[Rubric] = Rubric()
    spec: TerminalEnv

    def __init__(self, spec: TerminalEnv) -> None:
        super().__init__(spec)
        self.folder: TaskFolder | None = None
        self.runtime: TaskRuntime | None = None
        """The task's runtime (its image, or the host's filesystem), prepared at reset."""
        self.box: Sandbox | None = None
        self._oracle_token: str | None = None

    def system_prompt(self) -> str | None:
        return SYSTEM_PROMPT

    def oracle_actions(self, task: Task) -> list[Action]:
        """Run ``solution/solve.sh`` (through a tool only the holder of this episode's token
        may call), then submit."""
        folder = self.spec.folder(task.id)
        if folder.solution is None:
            raise ConfigError(
                f"task {task.id!r} has no solution/solve.sh: the oracle has nothing to run"
            )
        # the token proves the call comes from the privileged agent this was handed to
        self._oracle_token = secrets.token_hex(16)
        return [
            Action(tool_calls=[ToolCall(ORACLE_TOOL, {"token": self._oracle_token}, "oracle-0")]),
            Action(tool_calls=[ToolCall("submit", {}, "oracle-1")]),
        ]

    # --- the episode -------------------------------------------------------------------------
    async def on_reset(self, task: Task, seed: int | None) -> None:
        """Prepare the task's runtime (its workspace built once per content, then cached) and
        open a new sandbox of it. A host error on the way (no space, I/O) is the machinery's
        (``SandboxError``, an ``InfraError``); a task that cannot be built, a ``ConfigError``."""
        folder = self.folder = self.spec.folder(task.id)
        config = self.spec.config
        self.runtime = await prepare_runtime(
            folder, images=config.images, verifier_mode=config.verifier_mode,
            backend=config.sandbox,
        )  # fmt: skip
        self.box = await self.runtime.open(sandbox_limits(folder), f"agent-{folder.name}")

    def _sandbox(self) -> Sandbox:
        if self.box is None:
            raise EpisodeOrderError("no sandbox: call reset(task) first")
        return self.box

    async def call_tool(self, call: ToolCall, default_id: str = "") -> ToolResult:
        if call.name == ORACLE_TOOL and self._oracle_token is not None:
            args = call.arguments if isinstance(call.arguments, dict) else {}
            if secrets.compare_digest(str(args.get("token", "")), self._oracle_token):
                content = await self._run_solution()
                self.tool_log.append({"name": call.name, "result": content})
                return ToolResult(call.id or default_id, call.name, content)
        return await super().call_tool(call, default_id)

    async def _run_solution(self) -> str:
        """Mount the pristine solution read-only at /solution for one command: solve.sh."""
        assert self.folder is not None
        box = self._sandbox()
        tmp = await asyncio.to_thread(_private_copy, self.folder.solution_dir)
        try:
            timeout = self.folder.config.agent.timeout_sec
            res = await box.exec(
                ["bash", "/solution/solve.sh"],
                timeout=timeout,
                mounts=[Mount(tmp / "solution", "/solution")],
            )
        finally:
            await asyncio.to_thread(shutil.rmtree, tmp, True)
        return describe(res, timeout)

    # --- tools -------------------------------------------------------------------------------
    @tool
    async def run(self, command: str, timeout_sec: float = 120.0) -> str:
        """Run a bash command in the sandbox, in the task's working directory under /app.

        Args:
            command: The bash command line, e.g. "ls -la" or "python3 main.py > out.txt".
            timeout_sec: Seconds before the command and all its processes are killed.
        """
        if not command.strip():
            raise ToolCallError("command is empty; give a bash command such as 'ls -la'")
        timeout = max(1.0, min(timeout_sec, self.spec.config.run_timeout))
        res = await self._sandbox().exec(command, timeout=timeout)
        return describe(res, timeout)

    @tool
    async def read_file(self, path: str) -> str:
        """Read a text file of the sandbox.

        Args:
            path: Absolute, or relative to the working directory.
        """
        try:
            data = await self._sandbox().read_file(path, max_bytes=1 << 20)
        except SandboxFileError as e:
            raise ToolCallError(str(e)) from None
        return clip(data.decode(errors="replace"), 4 * SHOWN_OUTPUT)

    @tool
    async def write_file(self, path: str, content: str) -> str:
        """Create or overwrite a file of the sandbox (parent directories are created).

        Args:
            path: Absolute, or relative to the working directory.
            content: The whole new content of the file.
        """
        box = self._sandbox()
        try:
            await box.write_file(path, content)
        except SandboxFileError as e:
            raise ToolCallError(str(e)) from None
        return f"wrote {len(content.encode())} bytes to {box.resolve(path)}"

    @tool
    async def submit(self) -> str:
        """Declare the task done: the episode ends and your work is checked."""
        self.done = True
        return "submitted"

    # --- grading -----------------------------------------------------------------------------
    async def score(self) -> Reward:
        """Run the tests (again, from scratch, for a regrade) on the frozen workspace."""
        if self.box is None or self.runtime is None:
            raise EpisodeOrderError("grade() was called before reset() prepared a sandbox")
        return await self.runtime.grade(self.box)

    async def close(self) -> None:
        if self.box is not None:
            await self.box.close()
            self.box = None

    def state(self) -> dict[str, Any]:
        """The episode's state, with the digest of the workspace as reset made it (paths,
        modes, contents of the task's build): two resets of one task must give the same."""
        base = super().state()
        base["workspace_at_reset"] = None
        if self.runtime is not None:
            base.update(self.runtime.state())
        return base

    async def export_workspace(self, dest: Path) -> Path:
        """Copy the episode's workspace (as the agent left it) to ``dest`` on the host."""
        if self.box is None:
            raise EpisodeOrderError("no workspace to export: call reset(task) first")
        await asyncio.to_thread(copy_tree, self.box.host_workdir, dest)  # holes, links kept
        return dest


def _private_copy(solution: Path) -> Path:
    """A copy of ``solution/`` in a private scratch directory, readable by the sandbox uid."""
    tmp = scratch_dir("solution-")
    shutil.copytree(solution, tmp / "solution", symlinks=True)
    for p in [tmp, *(tmp / "solution").rglob("*")]:
        if not p.is_symlink():
            p.chmod(0o755 if p.is_dir() or p.suffix == ".sh" else 0o644)
    return tmp
