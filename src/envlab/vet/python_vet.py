"""The probes of a Python (tool) environment, in two phases, and the checks that read them.

The plan comes from what any agent sees, asked of one fresh episode (``EnvView``): the tools it
is offered, the system prompt, and whether one message ends the episode (a final answer). The
first phase runs the baselines, the oracle, the constant answers and the wider strategies
(``vet.strategies``), the spam agent and the action probes (``vet.actions``); the second, built
from what the first recorded, copies the answers found on what the agent could read
(``vet.surfaces``) and answers tasks identical to another with the other's answer
(``vet.impossible``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from envlab.core import Action, EnvSpec, Limits, Task, ToolSpec
from envlab.vet import checks as C
from envlab.vet.actions import action_agents, action_chances, check_paid_by_actions
from envlab.vet.impossible import CROSS_PROBE, check_impossible, cross_agents, identical_pairs
from envlab.vet.model import CheckResult, EnvCheck
from envlab.vet.plan import Episode, constant_agents, plan_python_env
from envlab.vet.spam import spam_agents
from envlab.vet.strategies import strategy_agents
from envlab.vet.surfaces import (
    COPY_PROBE,
    LeakFindings,
    check_reachable_leak,
    copy_agent,
    leak_env_check,
    scan_surfaces,
)

RunEpisodes = Callable[[list[Episode], dict[str, C.TaskEvidence]], Awaitable[None]]


@dataclass(slots=True)
class EnvView:
    """What an agent sees of a fresh episode of the first task."""

    tools: list[ToolSpec] = field(default_factory=list)
    system_prompt: str = ""
    single_answer: bool = False
    """A message without tool calls ended the episode."""


async def env_view(spec: EnvSpec, tasks: list[Task]) -> EnvView:
    """One fresh episode of the first task: reset, read what is offered, send one empty
    message, close. An episode that fails here is left for the probes to report."""
    if not tasks:
        return EnvView()
    env = spec.new_episode()
    view = EnvView()
    try:
        await env.reset(tasks[0], 0)
        view.tools = list(env.tools)
        view.system_prompt = env.system_prompt() or ""
        step = await env.step(Action(text=""))
        view.single_answer = bool(step.done)
    except Exception:  # the probes' episodes record the failure, with its phase
        pass
    finally:
        with contextlib.suppress(Exception):
            await env.close()
    return view


def _plays_an_oracle(spec: EnvSpec, task: Task) -> bool:
    """Whether the environment has a reference solution for a task that has no answer (a
    game whose best play it computes); a remote server, which keeps its answers, has none."""
    try:
        return bool(spec.new_episode().oracle_actions(task))
    except Exception:  # it needs its episode reset first, or has none: no oracle runs
        return False


@dataclass(slots=True)
class PythonProbes:
    view: EnvView
    leaks: LeakFindings = field(default_factory=LeakFindings)
    twins: dict[str, list[str]] = field(default_factory=dict)


async def run_python_probes(
    spec: EnvSpec,
    tasks: list[Task],
    evidence: dict[str, C.TaskEvidence],
    run: RunEpisodes,
    oracle_runs: int,
) -> PythonProbes:
    """Both phases of a Python environment's probes (see the module's docstring)."""
    view = await env_view(spec, tasks)
    for ev in evidence.values():
        ev.write_tools = [t.name for t in view.tools if t.writes]
    limits: dict[str, Limits] = {t.id: spec.limits(t) for t in tasks}
    constants = constant_agents(tasks)
    spam = spam_agents(tasks, limits, view.tools, view.single_answer)
    wider = strategy_agents(tasks, view.system_prompt)
    first: list[Episode] = []
    for t in tasks:
        extra = {**wider, **action_agents(view.tools, limits[t.id].max_steps)}
        first += plan_python_env(
            t, constants, oracle_runs=oracle_runs, spam=spam.get(t.id), extra=extra,
            has_oracle=t.answer is not None or _plays_an_oracle(spec, t),
        )  # fmt: skip
    await run(first, evidence)
    found = PythonProbes(view, scan_surfaces(tasks, evidence), identical_pairs(tasks, evidence))
    second = [Episode(t, COPY_PROBE, copy_agent(found.leaks.hits[t.id]))
              for t in tasks if t.id in found.leaks.hits]  # fmt: skip
    crosses = cross_agents(tasks, evidence, found.twins)
    second += [Episode(t, CROSS_PROBE, crosses[t.id]) for t in tasks if t.id in crosses]
    await run(second, evidence)
    return found


@dataclass(slots=True)
class PythonResults:
    per_task: dict[str, list[CheckResult]]
    """The checks to add to each task's, and the leak result to use instead of the prompt's."""
    leak: dict[str, CheckResult]
    env_checks: list[EnvCheck]


def python_results(
    tasks: list[Task],
    evidence: dict[str, C.TaskEvidence],
    probes: PythonProbes,
    prompt_leak: dict[str, CheckResult],
) -> PythonResults:
    """The action, impossible-task and reachable-leak checks of every task."""
    actions_env, actions = check_paid_by_actions(tasks, evidence, action_chances(probes.view.tools))
    twins_env, twins = check_impossible(tasks, evidence, probes.twins)
    leak: dict[str, CheckResult] = {}
    for t in tasks:
        mine = prompt_leak[t.id]
        reach = check_reachable_leak(evidence[t.id], probes.leaks.hits.get(t.id, []))
        if reach is not None and mine.status != "fail" and reach.status in ("fail", "warn"):
            mine = reach if reach.status == "fail" or mine.status == "pass" else mine
        leak[t.id] = mine
    return PythonResults(
        per_task={t.id: [actions[t.id], twins[t.id]] for t in tasks},
        leak=leak,
        env_checks=[leak_env_check(probes.leaks, len(tasks)), actions_env, twins_env],
    )


def wider_strategies(evidence: dict[str, C.TaskEvidence]) -> list[str]:
    """The names of the wider strategies that ran (``vet.strategies``)."""
    prefixes = ("numbers_seen", "candidates_seen", "format_", "long_junk")
    return sorted({p for ev in evidence.values() for p in ev.by_probe if p.startswith(prefixes)})
