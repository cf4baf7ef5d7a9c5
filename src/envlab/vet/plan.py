"""Which probe episodes ``envlab vet`` runs on a task, and with which agent.

The plan is vet's decision only (task, probe, the agent that plays it, sample, whether to grade
again); ``vet.runner`` gives each its ids and hooks and runs them all through the one episode
driver, ``envlab.rollout.run_episodes``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from envlab.agents.scripted import NoopAgent, OracleAgent
from envlab.agents.shell import ShellScriptAgent
from envlab.core import (
    Action,
    Agent,
    AgentClass,
    AgentFactory,
    AgentSpec,
    ConfigError,
    EpisodeContext,
    Observation,
    Task,
    ToolCall,
)
from envlab.envs.answers import answer_text
from envlab.runs import safe_name
from envlab.vet.hacks import deleted_workdir_probe, module_probes
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


class TamperThenOracleAgent(Agent):
    """Runs a script, then the reference solution (privileged), then a second script, then
    submits: the oracle on inputs the first script tampered with."""

    name = "tamper_then_oracle"
    privileged = True

    def __init__(self, before: str, after: str, label: str) -> None:
        """``before`` and ``after``: the two scripts' text (read where the probe is planned)."""
        self.before, self.after, self.label = before, after, label
        self._queue: list[Action] = []

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(
            name=f"vet:{self.label}", harness="vet:tamper_then_oracle", privileged=True
        )

    async def start(self, ctx: EpisodeContext) -> None:
        if ctx.oracle_actions is None:
            raise ConfigError(
                f"probe {self.label}: the engine gave the oracle no privileged access"
            )
        oracle = [
            a for a in ctx.oracle_actions if not any(c.name == "submit" for c in a.tool_calls)
        ]
        run = [Action(tool_calls=[ToolCall("run", {"command": s}, id=f"vet-{i}")])
               for i, s in enumerate((self.before, self.after))]  # fmt: skip
        submit = Action(tool_calls=[ToolCall("submit", {}, id="vet-submit")])
        self._queue = [run[0], *oracle, run[1], submit]

    async def act(self, observation: Observation) -> Action:
        return self._queue.pop(0) if self._queue else Action(text="done")


MAX_CONSTANT = 64
"""The longest answer the most-common-answer strategy gives."""

NOOP = AgentClass(NoopAgent)
ORACLE = AgentClass(OracleAgent)
ECHO_PROMPT = AgentClass(EchoPromptAgent)


@dataclass(frozen=True, slots=True)
class Episode:
    """One episode vet plans: a probe (its role in the checks) and the agent that plays it."""

    task: Task
    probe: str
    agent: AgentFactory
    sample: int = 0
    regrade: bool = False
    """Grade the final state again (``oracle_runs`` times) and keep a copy of the workspace."""
    max_retries: int = 0
    """Retries after ``infra_error``: none for a probe (an escape is evidence), some for the
    real agent."""


def _script(path: Path, probe: Probe, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/bash\n# envlab vet probe: " + probe.description + "\n" + body)
    return path


def probe_agent(probe: Probe, task: Task, probe_dir: Path) -> AgentFactory:
    """The agents that play ``probe``; its scripts are saved under ``probe_dir/TASK/`` (for
    the user to read and rerun) and travel in the factory as text (a Ray worker's host need
    not see that directory)."""
    d = probe_dir / safe_name(task.id)
    script = _script(d / f"{probe.name}.sh", probe, probe.script)
    if probe.after_oracle is None:
        return AgentClass(ShellScriptAgent, script, text=script.read_text())
    after = _script(d / f"{probe.name}.after-oracle.sh", probe, probe.after_oracle)
    return AgentClass(TamperThenOracleAgent, script.read_text(), after.read_text(), probe.name)


def probe_episodes(task: Task, probes: list[Probe], probe_dir: Path) -> list[Episode]:
    return [Episode(task, p.name, probe_agent(p, task, probe_dir)) for p in probes]


def plan_task_folder(
    task: Task,
    tests_text: str,
    *,
    probe_dir: Path,
    oracle_runs: int,
    network_port: int | None,
    python_targets: bool = True,
) -> tuple[list[Episode], dict[str, Probe]]:
    """The first phase: baselines, the oracle, and every probe that needs nothing the oracle
    did (``python_targets``: whether the code-under-test payloads can reach the verifier)."""
    instruction = task.prompt
    shell: list[Probe] = [
        empty_answer_probe(instruction),
        *tamper_probes(instruction, tests_text),
        *(module_probes(tests_text) if python_targets else []),
        deleted_workdir_probe(),
        *option_probes(instruction),
        network_probe(network_port),
    ]
    echo = echo_prompt_probe(instruction)
    if echo is not None:
        shell.append(echo)
    episodes = [Episode(task, "noop", NOOP)]  # submit at once
    episodes += [Episode(task, "oracle", ORACLE, i, regrade=i == 0) for i in range(oracle_runs)]
    episodes += probe_episodes(task, shell, probe_dir)
    return episodes, {p.name: p for p in shell}


def constant_agents(tasks: list[Task]) -> dict[str, AgentFactory]:
    """Answers a lazy agent would try on every task (0, 1, yes, no, and the most common one),
    each with the agents that give it. Only a plain answer (a number or a short text) can be
    the most common one: a record of hidden data (τ's gold actions) is no answer to give."""
    answers = [
        answer_text(t.answer)
        for t in tasks
        if isinstance(t.answer, str | int | float) and len(answer_text(t.answer)) <= MAX_CONSTANT
    ]
    common = [a for a, _ in Counter(answers).most_common(1)]
    out: dict[str, AgentFactory] = {}
    for a in ["0", "1", "yes", "no", *common]:
        out.setdefault(a, AgentClass(ConstantAgent, a))
    return out


def plan_python_env(
    task: Task,
    constants: dict[str, AgentFactory],
    *,
    oracle_runs: int,
    spam: AgentFactory | None = None,
    extra: dict[str, AgentFactory] | None = None,
    has_oracle: bool | None = None,
) -> list[Episode]:
    """Baselines (an empty final answer; with ``spam``, every read tool on every id found,
    all of it repeated to the user), the reference answer, and the trivial strategies: every
    constant answer (one shared agent per constant) and the echoed prompt; then the ``extra``
    probes by name (the wider strategies and the action probes). A task without an
    answer (a remote envlab server sends none) has no oracle runs, unless ``has_oracle`` says
    the environment computes a reference solution for it (a game's best play)."""
    episodes = [Episode(task, "noop", NOOP)]
    if spam is not None:
        episodes.append(Episode(task, "spam", spam))
    if has_oracle is None:
        has_oracle = task.answer is not None
    if has_oracle:  # no reference (a remote server keeps its answers): check n/a
        episodes += [Episode(task, "oracle", ORACLE, i, regrade=i == 0) for i in range(oracle_runs)]
    episodes += [Episode(task, f"constant_{c}", agent) for c, agent in constants.items()]
    episodes.append(Episode(task, "echo_prompt", ECHO_PROMPT))
    episodes += [Episode(task, name, agent) for name, agent in (extra or {}).items()]
    return episodes
