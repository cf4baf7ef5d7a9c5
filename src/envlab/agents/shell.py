"""``shell:FILE``: an agent whose only action is to run a script in the workspace, then submit.

For probes and tests: what a sandbox contains, whether an escape is contained, whether a
known-wrong answer scores 0.
"""

from __future__ import annotations

from pathlib import Path

from envlab.core import Action, Agent, AgentSpec, ConfigError, EpisodeContext, Observation, ToolCall

HOW_TO = (
    "Write --agent shell:FILE, where FILE holds bash commands "
    "that are run once, in the task's working directory under /app, through the task's 'run' "
    "tool (then the agent submits). For example, a solve.sh containing\n"
    "    #!/bin/bash\n"
    "    echo 42 > /app/answer.txt\n"
    "and then: envlab eval path/to/task-folder --agent shell:solve.sh"
)


class ShellScriptAgent(Agent):
    """Runs the script ``path`` through the environment's ``run`` tool, then calls ``submit``.

    ``text`` is the script itself, read once where the agent was planned (vet's probes on Ray
    workers, whose hosts need not see the driver's files); without it ``path`` is read here."""

    name = "shell"

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        timeout_sec: float | None = None,
        text: str | None = None,
    ) -> None:
        if path is None or not str(path).strip():
            raise ConfigError(f"the shell agent needs a script. {HOW_TO}")
        self.path = Path(path)
        try:
            self.script = self.path.read_text() if text is None else text
        except OSError as e:
            raise ConfigError(f"shell agent: cannot read script {self.path}: {e}. {HOW_TO}") from e
        self.timeout_sec = timeout_sec
        self._step = 0
        self._tools: set[str] = set()

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(
            name=f"shell:{self.path}",
            harness="scripted:shell",
            limits={"timeout_sec": self.timeout_sec} if self.timeout_sec else {},
        )

    async def start(self, ctx: EpisodeContext) -> None:
        self._step = 0
        self._tools = {t.name for t in ctx.tools}
        if "run" not in self._tools:
            raise ConfigError(
                "the shell agent needs an environment with a 'run' tool (a task folder); "
                f"this one has: {', '.join(sorted(self._tools)) or 'no tools'}"
            )

    async def act(self, observation: Observation) -> Action:
        self._step += 1
        if self._step == 1:
            args: dict[str, object] = {"command": self.script}
            if self.timeout_sec is not None:
                args["timeout_sec"] = self.timeout_sec
            return Action(tool_calls=[ToolCall("run", args, id="shell-run")])
        if self._step == 2 and "submit" in self._tools:
            return Action(tool_calls=[ToolCall("submit", {}, id="shell-submit")])
        return Action(text="done")
