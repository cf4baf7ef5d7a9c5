"""``TerminalEnv``: a ``ToolEnv`` over task folders. The agent works in a fresh sandbox through
``run``, ``read_file``, ``write_file`` and ``submit``; the grade comes from the task's tests,
run after the agent stopped, in a separate verifier sandbox.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import shutil
from pathlib import Path
from typing import Any, ClassVar

from envlab.core import (
    Action,
    ConfigError,
    Environment,
    GraderFailed,
    InfraError,
    Reward,
    Rubric,
    StepResult,
    Task,
    TaskSet,
    ToolCall,
    ToolCallError,
    ToolEnv,
    ToolResult,
    tool,
)
from envlab.envs.taskfolder.build import PreparedWorkspace, prepare_workspace
from envlab.envs.taskfolder.model import TaskFolder, find_task_folders
from envlab.envs.taskfolder.verifier import run_verifier
from envlab.sandbox import (
    BubblewrapSandbox,
    ExecResult,
    Limits,
    Mount,
    SandboxFileError,
    copy_tree,
    scratch_dir,
    scrub_tree,
)

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


class TerminalEnv(ToolEnv):
    """Task folders (one, or a directory of them) as an environment.

    Each episode builds (once per content hash, then cached) and copies the task's workspace
    into a fresh bubblewrap sandbox. ``grade()`` kills every process of that sandbox, then runs
    ``tests/test.sh`` in a separate verifier sandbox; a missing or malformed reward, a verifier
    crash or timeout raise ``InfraError`` (the episode is ``infra_error``, never a silent 0).
    """

    id: ClassVar[str] = "taskfolder"
    description: ClassVar[str] = "Harbor-style task folders in a bubblewrap sandbox"
    version: ClassVar[str] = "1"
    rubric: ClassVar[Rubric] = Rubric()
    max_steps = 100

    def __init__(self, path: str | Path, *, run_timeout: float = 120.0) -> None:
        super().__init__()
        self.path = Path(path).resolve()
        self.run_timeout = run_timeout
        self._folders: dict[str, TaskFolder] = {f.name: f for f in find_task_folders(self.path)}
        self.folder: TaskFolder | None = None
        self.prepared: PreparedWorkspace | None = None
        self.box: BubblewrapSandbox | None = None
        self._oracle_token: str | None = None
        self._in_step = False
        self._scrubbed: list[dict[str, str]] = []

    def spawn(self) -> TerminalEnv:
        """A fresh episode instance that shares the parsed task folders (no rescan per episode)."""
        clone = object.__new__(type(self))
        clone._init_args = self._init_args
        ToolEnv.__init__(clone)
        clone.path, clone.run_timeout, clone._folders = self.path, self.run_timeout, self._folders
        clone.folder = clone.prepared = clone.box = None
        clone._oracle_token, clone._in_step, clone._scrubbed = None, False, []
        return clone

    # --- the environment as a whole ----------------------------------------------------------
    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        tasks = [self._task(f) for f in self._folders.values() if f.config.split == split]
        if not tasks:
            splits = sorted({f.config.split for f in self._folders.values()})
            raise ConfigError(f"no task in {self.path} has split {split!r}; splits: {splits}")
        return TaskSet(tasks, seed=seed, name=self.path.name).head(n)

    @staticmethod
    def _task(f: TaskFolder) -> Task:
        cfg = f.config
        return Task(
            id=f.name,
            prompt=f.instruction,
            answer=str(f.solution) if f.solution else None,
            split=cfg.split,
            metadata={
                **cfg.metadata,
                **{k: v for k, v in cfg.task.items() if isinstance(v, str | int | float)},
                "path": str(f.path),
                "agent_timeout_sec": cfg.agent.timeout_sec,
                "verifier_timeout_sec": cfg.verifier.timeout_sec,
                "network_mode": cfg.network_mode_for("agent"),
            },
        )

    def system_prompt(self) -> str | None:
        return SYSTEM_PROMPT

    def content_hash(self) -> str:
        h = hashlib.sha256(super().content_hash().encode())
        for name, folder in sorted(self._folders.items()):
            h.update(f"{name}\0{folder.content_hash()}\0".encode())
        return h.hexdigest()[:16]

    def oracle_actions(self, task: Task) -> list[Action]:
        folder = self._folders.get(task.id)
        if folder is None or folder.solution is None:
            raise ConfigError(
                f"task {task.id!r} has no solution/solve.sh: the oracle has nothing to run"
            )
        # the token proves the call comes from the privileged agent this was handed to
        self._oracle_token = secrets.token_hex(16)
        return [
            Action(tool_calls=[ToolCall(ORACLE_TOOL, {"token": self._oracle_token}, "oracle-0")]),
            Action(tool_calls=[ToolCall("submit", {}, "oracle-1")]),
        ]

    # --- one episode -------------------------------------------------------------------------
    async def on_reset(self, task: Task, seed: int | None) -> None:
        folder = self._folders.get(task.id)
        if folder is None:
            raise ConfigError(f"task {task.id!r} is not in {self.path}")
        if self.box is not None:
            await self.box.close()
        self.folder = folder
        self.prepared = await prepare_workspace(folder)
        cfg = folder.config.environment
        self.box = await BubblewrapSandbox.create(
            self.prepared.app_dir,
            limits=self.limits(folder),
            network=folder.config.network_for("agent"),
            env={**self.prepared.env, **cfg.env},
            workdir=self.prepared.workdir,
            name=f"agent-{folder.name}",
        )

    @staticmethod
    def limits(folder: TaskFolder) -> Limits:
        cfg = folder.config.environment
        # storage_mb bounds the whole workspace (a filesystem of its own), not one file
        return Limits(
            memory_bytes=(cfg.memory_mb or 4096) << 20,
            **({"storage_bytes": cfg.storage_mb << 20} if cfg.storage_mb else {}),
        )

    def _sandbox(self) -> BubblewrapSandbox:
        if self.box is None:
            raise RuntimeError("no sandbox: call reset(task) first")
        return self.box

    async def step(self, action: Action) -> StepResult:
        self._in_step = True  # the grade waits for grade(), after the agent stopped
        try:
            return await super().step(action)
        finally:
            self._in_step = False

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
        tmp = scratch_dir("solution-")
        try:
            shutil.copytree(self.folder.solution_dir, tmp / "solution", symlinks=True)
            for p in [tmp, *(tmp / "solution").rglob("*")]:
                if not p.is_symlink():
                    p.chmod(0o755 if p.is_dir() or p.suffix == ".sh" else 0o644)
            timeout = self.folder.config.agent.timeout_sec
            res = await box.exec(
                ["bash", "/solution/solve.sh"],
                timeout=timeout,
                mounts=[Mount(tmp / "solution", "/solution")],
            )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
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
        timeout = max(1.0, min(timeout_sec, self.run_timeout))
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
    async def grade(self) -> Reward | None:
        if self._in_step:
            return None
        if self._reward is None:
            self._reward = await self._verify()
        return self._reward

    async def regrade(self) -> Reward:
        """Run the tests again, from scratch, on the same frozen workspace."""
        return await self._verify()

    async def _verify(self) -> Reward:
        if self.box is None or self.folder is None or self.prepared is None:
            raise InfraError("grade() was called before reset() prepared a sandbox")
        await self.box.kill_all()  # every process of the agent is gone; no command can start
        # what the agent's sandbox could not see is not carried into the verifier's: links out
        # of the workspace (into /tests, /dev, /proc) or dangling, FIFOs, sockets, devices
        self._scrubbed += await asyncio.to_thread(scrub_tree, self.box.host_workdir)
        cfg = self.folder.config.environment
        try:
            reward = await run_verifier(
                self.folder,
                self.box.host_workdir,
                self.prepared,
                memory_mb=cfg.memory_mb or 4096,
                network=self.folder.config.network_for("verifier"),
            )
        except GraderFailed as e:
            self._record_scrubbed(e.details)
            raise
        self._record_scrubbed(reward.details)
        return reward

    def _record_scrubbed(self, details: dict[str, Any]) -> None:
        if self._scrubbed:
            not_carried = [*self._scrubbed, *details.get("not_carried", [])]  # type: ignore[misc]
            details["not_carried"] = not_carried[:200]

    async def close(self) -> None:
        if self.box is not None:
            await self.box.close()
            self.box = None

    def state(self) -> dict[str, Any]:
        """The episode's state, with a digest of the workspace (paths, modes, contents): two
        resets of one task must give the same digest."""
        base = super().state()
        base["workspace_digest"] = (
            workspace_digest(self.box.host_workdir) if self.box is not None else None
        )
        return base

    async def export_workspace(self, dest: Path) -> Path:
        """Copy the episode's workspace (as the agent left it) to ``dest`` on the host."""
        if self.box is None:
            raise RuntimeError("no workspace to export: call reset(task) first")
        await asyncio.to_thread(copy_tree, self.box.host_workdir, dest)  # holes, links kept
        return dest


def workspace_digest(root: Path, *, max_file_bytes: int = 16 << 20) -> str:
    """sha256 over the relative paths, modes and contents of a tree (large files: their size)."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        st = path.lstat()
        h.update(f"{rel}\0{st.st_mode:o}\0".encode())
        if path.is_symlink():
            h.update(os.readlink(path).encode())
        elif path.is_file():
            if st.st_size > max_file_bytes:
                h.update(f"size:{st.st_size}".encode())
            else:
                h.update(path.read_bytes())
    return h.hexdigest()[:16]


def load_task_env(path: Path, **kwargs: Any) -> Environment:
    """The environment of a task folder, or of a directory of task folders (``kwargs``:
    ``TerminalEnv``'s, e.g. ``run_timeout``)."""
    return TerminalEnv(path, **kwargs)
