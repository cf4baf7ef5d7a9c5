"""Which probe episodes ``envlab vet`` runs on a task, and with which agent."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from envlab.agents.scripted import NoopAgent, OracleAgent
from envlab.agents.shell import ShellScriptAgent
from envlab.core import Action, Agent, AgentSpec, EpisodeContext, Observation, Task
from envlab.envs.answers import answer_text
from envlab.vet.probes import (
    Probe,
    echo_prompt_probe,
    empty_answer_probe,
    network_probe,
    option_probes,
    tamper_probes,
)


class ConstantAgent(Agent):
    """Gives the same final answer to every task: a trivial strategy."""

    name = "constant"

    def __init__(self, answer: str, label: str = "") -> None:
        self.answer = answer
        self.label = label or answer

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name=f"constant:{self.label}", harness="vet:constant")

    async def act(self, observation: Observation) -> Action:
        return Action(text=self.answer)


class EchoPromptAgent(Agent):
    """Answers with the prompt it was given."""

    name = "echo_prompt"

    def __init__(self) -> None:
        self._prompt = ""

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name="echo_prompt", harness="vet:echo")

    async def start(self, ctx: EpisodeContext) -> None:
        self._prompt = ctx.prompt

    async def act(self, observation: Observation) -> Action:
        return Action(text=self._prompt)


@dataclass(slots=True)
class Episode:
    """One planned episode: a probe (its role in the checks) and the agent that plays it."""

    task: Task
    probe: str
    agent: Agent
    sample: int = 0
    regrade: bool = False
    description: str = ""


@dataclass(slots=True)
class Plan:
    episodes: list[Episode] = field(default_factory=list)
    probes: dict[str, dict[str, Probe]] = field(default_factory=dict)
    """Per task, the shell probes by name (their scripts are written to the vet directory)."""


def shell_agent(probe: Probe, task: Task, probe_dir: Path) -> ShellScriptAgent:
    path = probe_dir / safe_name(task.id) / f"{probe.name}.sh"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/bash\n# envlab vet probe: " + probe.description + "\n" + probe.script)
    return ShellScriptAgent(path)


def safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def plan_task_folder(
    task: Task,
    tests_text: str,
    *,
    probe_dir: Path,
    oracle_runs: int,
    network_port: int | None,
) -> tuple[list[Episode], dict[str, Probe]]:
    instruction = task.prompt
    shell: list[Probe] = [
        empty_answer_probe(instruction),
        *tamper_probes(instruction, tests_text),
        *option_probes(instruction),
        network_probe(network_port),
    ]
    echo = echo_prompt_probe(instruction)
    if echo is not None:
        shell.append(echo)
    episodes = [Episode(task, "noop", NoopAgent(), description="submit at once")]
    episodes += [
        Episode(task, "oracle", OracleAgent(), sample=i, regrade=i == 0, description="solve.sh")
        for i in range(oracle_runs)
    ]
    episodes += [
        Episode(task, p.name, shell_agent(p, task, probe_dir), description=p.description)
        for p in shell
    ]
    return episodes, {p.name: p for p in shell}


def constant_answers(tasks: list[Task]) -> list[str]:
    """Answers a lazy agent would try on every task: 0, 1, yes, no, and the most common one."""
    answers = [answer_text(t.answer) for t in tasks if t.answer is not None]
    common = [a for a, _ in Counter(answers).most_common(1)]
    out: list[str] = []
    for a in ["0", "1", "yes", "no", *common]:
        if a not in out:
            out.append(a)
    return out


def plan_python_env(task: Task, constants: list[str], *, oracle_runs: int) -> list[Episode]:
    episodes = [Episode(task, "noop", NoopAgent(), description="empty final answer")]
    episodes += [
        Episode(task, "oracle", OracleAgent(), sample=i, regrade=i == 0, description="reference")
        for i in range(oracle_runs)
    ]
    episodes += [
        Episode(task, f"constant_{c}", ConstantAgent(c), description=f"always answer {c!r}")
        for c in constants
    ]
    episodes.append(Episode(task, "echo_prompt", EchoPromptAgent(), description="echo the prompt"))
    return episodes
