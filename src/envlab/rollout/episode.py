"""One episode, from reset to grade, with timeouts, error attribution and infra retries."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from envlab.core import (
    Agent,
    AgentSpec,
    Environment,
    EpisodeContext,
    InfraError,
    Reward,
    Status,
    StepRecord,
    Task,
    Timings,
    Trajectory,
    install_agent_clock,
    reset_agent_clock,
)
from envlab.rollout.deadlines import WAIT, EpisodeClock, deadlines
from envlab.rollout.grading import grade_episode


@dataclass(frozen=True, slots=True)
class EpisodeConfig:
    """Limits of one episode and how infra failures are retried."""

    step_timeout: float | None = 60.0
    episode_timeout: float | None = 600.0
    grade_timeout: float | None = 600.0
    reset_timeout: float | None = 900.0
    """Limit of ``reset`` (building a workspace, starting a sandbox): not the agent's time; past
    it the episode is ``infra_error``."""
    max_steps: int | None = None
    """Overrides the environment's own ``max_steps`` when set."""
    wait_timeout: float | None = 3600.0
    """The longest an attempt may wait in all for shared resources (a model's queue, a rate
    limit's backoff, a sandbox starting: ``core.clock.not_agent_time``), time that is not on
    the step and episode clocks; past it the episode is ``infra_error`` (the machinery is
    overloaded)."""
    max_retries: int = 2
    retry_backoff: float = 0.05


@dataclass(frozen=True, slots=True)
class EpisodeHooks:
    """Callbacks for tools that inspect an episode as it runs (``envlab vet``).

    ``after_reset(env)`` runs right after ``reset``; ``after_grade(env, reward)`` after the
    grade, before ``close``. What they return is stored in ``trajectory.info`` under their names;
    an exception in a hook is recorded there too and does not change the episode's status.
    """

    after_reset: Callable[[Environment], Awaitable[dict[str, Any]]] | None = None
    after_grade: Callable[[Environment, Reward | None], Awaitable[dict[str, Any]]] | None = None


async def _hook(aw: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    try:
        return await aw
    except Exception as e:
        return {"hook_error": _describe(e)}


def _describe(e: BaseException) -> str:
    tb = traceback.format_exception(type(e), e, e.__traceback__, limit=-3)
    return f"{type(e).__name__}: {e}\n" + "".join(tb[-3:])


def group_id(env_id: str, env_hash: str, task_id: str, run_seed: int) -> str:
    """The id shared by every sample of one task in one run (a GRPO group)."""
    key = f"{env_id}\0{env_hash}\0{task_id}\0{run_seed}".encode()
    return hashlib.sha256(key).hexdigest()[:16]


def episode_ids_in_group(group: str, sample: int) -> tuple[str, str, int]:
    """``(episode_id, group_id, seed)`` of sample ``sample`` of a group; deterministic."""
    seed = (int(group[8:16], 16) ^ (sample * 0x9E3779B1)) & 0xFFFFFFFF
    return f"{group}-{sample}", group, seed


def episode_ids(
    env_id: str, env_hash: str, task_id: str, run_seed: int, sample: int
) -> tuple[str, str, int]:
    """Deterministic ``(episode_id, group_id, seed)``: the same run gives the same ids on resume."""
    return episode_ids_in_group(group_id(env_id, env_hash, task_id, run_seed), sample)


async def run_episode(
    env_proto: Environment,
    agent_proto: Agent,
    task: Task,
    sample_index: int,
    *,
    env_id: str,
    env_hash: str,
    agent_spec: AgentSpec,
    run_seed: int = 0,
    config: EpisodeConfig | None = None,
    ids: tuple[str, str, int] | None = None,
    hooks: EpisodeHooks | None = None,
) -> Trajectory:
    """Run one episode; retry it on ``infra_error`` up to ``config.max_retries`` times.

    ``ids`` are the episode's ``(episode_id, group_id, seed)`` when the caller computed them.
    """
    cfg = config or EpisodeConfig()
    episode_id, group_id, seed = ids or episode_ids(
        env_id, env_hash, task.id, run_seed, sample_index
    )
    attempt = 0
    while True:
        attempt += 1
        traj = await _attempt(env_proto, agent_proto, agent_spec, task, seed, cfg, hooks)
        if traj.status is not Status.INFRA_ERROR or attempt > cfg.max_retries:
            break
        await asyncio.sleep(cfg.retry_backoff * 2 ** (attempt - 1))
    traj.episode_id, traj.group_id, traj.sample_index = episode_id, group_id, sample_index
    traj.env_id, traj.env_hash, traj.agent, traj.attempts = env_id, env_hash, agent_spec, attempt
    return traj


_NO_AGENT = AgentSpec(name="")


async def _attempt(
    env_proto: Environment,
    agent_proto: Agent,
    agent_spec: AgentSpec,
    task: Task,
    seed: int,
    cfg: EpisodeConfig,
    hooks: EpisodeHooks | None = None,
) -> Trajectory:
    """One try at the episode; ``run_episode`` fills in the ids and the agent spec."""
    clock = time.perf_counter
    started, t0 = time.time(), clock()
    dl = deadlines()
    me = asyncio.current_task()
    assert me is not None, "run_episode must run inside an asyncio task"
    messages: list[dict[str, Any]] = []
    steps: list[StepRecord] = []
    status, error = Status.OK, None
    agent_s = env_s = grade_s = 0.0
    step_rewards = 0.0
    tool_errors = 0
    reward: Reward | None = None
    env: Environment | None = None
    agent: Agent | None = None
    info: dict[str, Any] = {}
    # who is running right now, to attribute an exception: "env", "agent" or "engine"
    phase = "engine"
    stage = "reset"  # what the episode is doing, for a timeout's message: reset, start, steps
    # waiting for shared resources stops the step and episode clocks (core.clock)
    agent_clock = dl.agent_clock(me, wait_limit=cfg.wait_timeout)
    clock_token = install_agent_clock(agent_clock)
    try:
        dl.set(me, cfg.reset_timeout, _RESET)
        phase = "agent"
        agent = agent_proto.spawn()
        phase = "env"
        env = env_proto.spawn()
        max_steps = cfg.max_steps or env.max_steps
        ts = clock()
        obs = await env.reset(task, seed)
        if hooks is not None and hooks.after_reset is not None:
            info["after_reset"] = await _hook(hooks.after_reset(env))
        system = env.system_prompt()
        # hidden data goes only to an agent whose recorded spec says it is privileged
        privileged = agent_spec.privileged
        ctx = EpisodeContext(
            task_id=task.id,
            prompt=obs.text,
            tools=env.tools,
            seed=seed,
            system_prompt=system,
            task=task if privileged else None,
            oracle_actions=env.oracle_actions(task) if privileged else None,
        )
        phase = "engine"
        if system:
            messages.append({"role": "system", "content": system})
        messages.extend(obs.to_messages())
        tm = clock()
        env_s += tm - ts
        # the agent's time starts now: building the workspace is not the agent's time
        agent_clock.start()
        episode_deadline = dl.set(me, cfg.episode_timeout, _EPISODE, pausable=True)
        phase, stage = "agent", "start"
        await agent.start(ctx)
        agent_s += clock() - tm
        stage = "steps"
        for index in range(max_steps):
            if cfg.step_timeout is not None:
                dl.set(
                    me,
                    cfg.step_timeout,
                    _STEP,
                    cap=episode_deadline,
                    cap_reason=_EPISODE,
                    pausable=True,
                )
            ts = clock()
            phase = "agent"
            action = await agent.act(obs)
            tm = clock()
            phase = "env"
            result = await env.step(action)
            te = clock()
            phase = "engine"
            agent_s += tm - ts
            env_s += te - tm
            obs = result.observation
            n_err = result.info.get("tool_errors", 0)
            tool_errors += n_err
            step_rewards += result.reward
            steps.append(
                StepRecord(
                    index=index,
                    message_index=len(messages),
                    reward=result.reward,
                    tool_errors=n_err,
                    info=result.info,
                    action_info=action.info,
                    agent_s=tm - ts,
                    env_s=te - tm,
                )
            )
            messages.append(action.to_message())
            if obs.tool_results or obs.text:
                messages.extend(obs.to_messages())
            if result.done:
                break
            if result.truncated:
                status = Status.TRUNCATED
                break
        else:
            status = Status.TRUNCATED
    except asyncio.CancelledError:
        reason = dl.expired(me)
        if reason is None:  # a real cancellation (shutdown, Ctrl-C): release, then go on with it
            await _close_quietly(env, agent)
            raise
        me.uncancel()
        status, error = _timed_out(reason, cfg, len(steps), _doing(stage, phase), agent_clock)
    except Exception as e:
        reason = dl.expired(me)  # the party may have turned our cancellation into its own error
        if reason is not None:
            me.uncancel()
            status, error = _timed_out(reason, cfg, len(steps), _doing(stage, phase), agent_clock)
        elif isinstance(e, InfraError):  # transport or sandbox: never the party's fault
            status, error = Status.INFRA_ERROR, _describe(e)
        elif phase == "env":
            status, error = Status.ENV_ERROR, _describe(e)
        elif phase == "agent":
            status, error = Status.AGENT_ERROR, _describe(e)
        else:  # a bug in the engine is infrastructure, not the agent's failure
            status, error = Status.INFRA_ERROR, "engine: " + _describe(e)
    finally:
        agent_clock.close()
        reset_agent_clock(clock_token)
        if dl.clear(me):
            await dl.absorb(me)

    grader_failed: str | None = None
    if env is not None and status.scored:
        ts = clock()
        try:
            reward, grader_failed = await grade_episode(
                env, task, step_rewards, cfg.grade_timeout, me
            )
            if reward.details:  # the verifier's exit code and output tail, why it failed
                info["grade"] = reward.details
        except asyncio.CancelledError:
            await _close_quietly(env, agent)
            raise
        except InfraError as e:  # the grading machinery itself failed: not the agent's
            status, error = Status.INFRA_ERROR, "grader: " + _describe(e)
        grade_s = clock() - ts
    if env is not None and hooks is not None and hooks.after_grade is not None:
        info["after_grade"] = await _hook(hooks.after_grade(env, reward))
    for party, closer in ((env, "env"), (agent, "agent")):
        if party is None:
            continue
        try:
            await party.close()
        except Exception as e:  # a failed close loses nothing already recorded
            error = (error + "\n" if error else "") + f"{closer}.close(): {_describe(e)}"
    token_view = None
    scored = status.scored
    if agent is not None and scored:
        try:
            token_view = agent.token_view()
        except Exception as e:
            error = (error + "\n" if error else "") + f"agent.token_view(): {_describe(e)}"
    duration = clock() - t0
    return Trajectory(
        episode_id="",
        task_id=task.id,
        group_id="",
        sample_index=0,
        reward=reward.total if (reward is not None and scored) else None,
        status=status,
        env_id="",
        env_hash="",
        seed=seed,
        agent=_NO_AGENT,
        components=reward.components if (reward is not None and scored) else {},
        gated_by=reward.gated_by if reward is not None else None,
        messages=messages,
        steps=steps,
        tokens=token_view,
        n_steps=len(steps),
        tool_errors=tool_errors,
        error=error,
        grader_failed=grader_failed if scored else None,
        info=info,
        timings=Timings(
            started_at=started,
            ended_at=started + duration,
            duration_s=duration,
            agent_s=agent_s,
            env_s=env_s,
            grade_s=grade_s,
            waited_s=agent_clock.waited_s,
        ),
    )


_EPISODE, _STEP, _RESET = "episode", "step", "reset"


_DOING = {
    ("reset", "env"): "the environment was resetting",
    ("reset", "agent"): "the agent was being created",
    ("start", "agent"): "the agent was starting",
    ("steps", "agent"): "the agent was acting",
    ("steps", "env"): "the environment was stepping",
}


def _doing(stage: str, phase: str) -> str:
    return _DOING.get((stage, phase), "the engine was between steps")


def _timed_out(
    reason: str, cfg: EpisodeConfig, step_index: int, doing: str, clock: EpisodeClock
) -> tuple[Status, str]:
    """The status and message of a fired deadline: which limit, its value, and what was
    running. Only the agent's own limits (step, episode) are its failure."""
    where = f"while {doing}"
    waited = (
        f" ({clock.waited_s:.1f}s of waiting for shared resources not counted)"
        if clock.waited_s >= 0.05
        else ""
    )
    if reason == _RESET:
        return (
            Status.INFRA_ERROR,
            f"reset took longer than reset_timeout={cfg.reset_timeout}s {where}",
        )
    if reason.startswith(WAIT):
        return Status.INFRA_ERROR, (
            f"waited longer than wait_timeout={cfg.wait_timeout}s in all for shared resources "
            f"(last: {reason.removeprefix(WAIT)}) at step {step_index} {where}: the machinery "
            "is overloaded, not the agent slow; run fewer episodes at once (--concurrency) "
            "or give the model more capacity"
        )
    if reason == _STEP:
        return Status.TIMEOUT, (
            f"step {step_index} took longer than step_timeout={cfg.step_timeout}s {where}{waited}"
        )
    return Status.TIMEOUT, (
        f"the episode took longer than episode_timeout={cfg.episode_timeout}s, at step "
        f"{step_index} {where}{waited}"
    )


async def _close_quietly(env: Environment | None, agent: Agent | None) -> None:
    """Release what an episode holds even when it is being cancelled (sandboxes, servers)."""
    for party in (env, agent):
        if party is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(party.close())
