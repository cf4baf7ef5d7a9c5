"""One episode, from reset to grade, with timeouts, error attribution and infra retries."""

from __future__ import annotations

import asyncio
import hashlib
import time
import traceback
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

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
)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class EpisodeConfig:
    """Limits of one episode and how infra failures are retried."""

    step_timeout: float | None = 60.0
    episode_timeout: float | None = 600.0
    grade_timeout: float | None = 600.0
    max_steps: int | None = None
    """Overrides the environment's own ``max_steps`` when set."""
    max_retries: int = 2
    retry_backoff: float = 0.05


class _PartyFailure(Exception):
    status: Status = Status.INFRA_ERROR

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _EnvFailure(_PartyFailure):
    status = Status.ENV_ERROR


class _AgentFailure(_PartyFailure):
    status = Status.AGENT_ERROR


class _Timeout(Exception):
    pass


async def _call(aw: Awaitable[T], failure: type[_PartyFailure]) -> T:
    """Await a call into the environment or the agent, attributing its exceptions to it.

    ``InfraError`` stays infra: a transport or sandbox failure is never the party's fault.
    """
    try:
        return await aw
    except InfraError:
        raise
    except Exception as e:
        raise failure(e) from e


def _describe(e: BaseException) -> str:
    tb = traceback.format_exception(type(e), e, e.__traceback__, limit=-3)
    return f"{type(e).__name__}: {e}\n" + "".join(tb[-3:])


def episode_ids(
    env_id: str, env_hash: str, task_id: str, run_seed: int, sample: int
) -> tuple[str, str, int]:
    """Deterministic ``(episode_id, group_id, seed)``: the same run gives the same ids on resume."""
    group = hashlib.sha256(f"{env_id}\0{env_hash}\0{task_id}\0{run_seed}".encode()).hexdigest()[:12]
    seed = int(hashlib.sha256(f"{run_seed}\0{task_id}\0{sample}".encode()).hexdigest()[:8], 16)
    return f"{group}-{sample}", group, seed


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
) -> Trajectory:
    """Run one episode; retry it on ``infra_error`` up to ``config.max_retries`` times."""
    cfg = config or EpisodeConfig()
    episode_id, group_id, seed = episode_ids(env_id, env_hash, task.id, run_seed, sample_index)
    attempt = 0
    while True:
        attempt += 1
        traj = await _attempt(env_proto, agent_proto, task, seed, cfg)
        if traj["status"] is not Status.INFRA_ERROR or attempt > cfg.max_retries:
            break
        await asyncio.sleep(cfg.retry_backoff * 2 ** (attempt - 1))
    return Trajectory(
        episode_id=episode_id,
        task_id=task.id,
        group_id=group_id,
        sample_index=sample_index,
        env_id=env_id,
        env_hash=env_hash,
        seed=seed,
        agent=agent_spec,
        attempts=attempt,
        **traj,
    )


async def _attempt(
    env_proto: Environment, agent_proto: Agent, task: Task, seed: int, cfg: EpisodeConfig
) -> dict[str, Any]:
    started, t0 = time.time(), time.perf_counter()
    messages: list[dict[str, Any]] = []
    steps: list[StepRecord] = []
    status, error = Status.OK, None
    agent_s = env_s = grade_s = 0.0
    step_rewards = 0.0
    tool_errors = 0
    reward: Reward | None = None
    env: Environment | None = None
    agent: Agent | None = None
    try:
        env, agent = env_proto.spawn(), agent_proto.spawn()
        max_steps = cfg.max_steps or env.max_steps
        async with asyncio.timeout(cfg.episode_timeout) as episode_cm:
            try:
                ts = time.perf_counter()
                obs = await _call(env.reset(task, seed), _EnvFailure)
                env_s += time.perf_counter() - ts
                system = env.system_prompt()
                privileged = agent.privileged
                ctx = EpisodeContext(
                    task_id=task.id,
                    prompt=obs.text,
                    tools=env.tools,
                    seed=seed,
                    system_prompt=system,
                    task=task if privileged else None,
                    oracle_actions=env.oracle_actions(task) if privileged else None,
                )
                if system:
                    messages.append({"role": "system", "content": system})
                messages.extend(obs.to_messages())
                ts = time.perf_counter()
                await _call(agent.start(ctx), _AgentFailure)
                agent_s += time.perf_counter() - ts
                for index in range(max_steps):
                    async with asyncio.timeout(cfg.step_timeout) as step_cm:
                        try:
                            ts = time.perf_counter()
                            action = await _call(agent.act(obs), _AgentFailure)
                            tm = time.perf_counter()
                            result = await _call(env.step(action), _EnvFailure)
                            te = time.perf_counter()
                        except asyncio.CancelledError:
                            if step_cm.expired():
                                raise _Timeout(
                                    f"step {index} took longer than {cfg.step_timeout}s"
                                ) from None
                            raise
                    agent_s += tm - ts
                    env_s += te - tm
                    obs = result.observation
                    n_err = int(result.info.get("tool_errors", 0))
                    tool_errors += n_err
                    step_rewards += result.reward
                    action_msg = action.to_message()
                    messages.append(action_msg)
                    messages.extend(obs.to_messages())
                    steps.append(
                        StepRecord(
                            index=index,
                            action=action_msg
                            if not action.info
                            else {**action_msg, "info": action.info},
                            observation={
                                "text": obs.text,
                                "tool_results": [r.to_message() for r in obs.tool_results],
                            },
                            reward=result.reward,
                            tool_errors=n_err,
                            info=result.info,
                            agent_s=tm - ts,
                            env_s=te - tm,
                        )
                    )
                    if result.done:
                        break
                    if result.truncated:
                        status = Status.TRUNCATED
                        break
                else:
                    status = Status.TRUNCATED
            except asyncio.CancelledError:
                if episode_cm.expired():
                    raise _Timeout(f"episode took longer than {cfg.episode_timeout}s") from None
                raise
    except _Timeout as e:
        status, error = Status.TIMEOUT, str(e)
    except TimeoutError as e:
        status, error = Status.TIMEOUT, str(e) or "timed out"
    except _PartyFailure as e:
        status, error = e.status, _describe(e.cause)
    except InfraError as e:
        status, error = Status.INFRA_ERROR, _describe(e)
    except Exception as e:  # a bug in the engine is infrastructure, not the agent's failure
        status, error = Status.INFRA_ERROR, "engine: " + _describe(e)

    if env is not None and status.scored:
        ts = time.perf_counter()
        try:
            async with asyncio.timeout(cfg.grade_timeout):
                reward = await _call(env.grade(), _EnvFailure)
        except TimeoutError:
            status, error = Status.INFRA_ERROR, f"grader took longer than {cfg.grade_timeout}s"
        except InfraError as e:
            status, error = Status.INFRA_ERROR, "grader: " + _describe(e)
        except _PartyFailure as e:
            status, error = Status.ENV_ERROR, "grader: " + _describe(e.cause)
        grade_s = time.perf_counter() - ts
    for party, closer in ((env, "env"), (agent, "agent")):
        if party is None:
            continue
        try:
            await party.close()
        except Exception as e:  # a failed close loses nothing already recorded
            error = (error + "\n" if error else "") + f"{closer}.close(): {_describe(e)}"
    token_view = None
    if agent is not None and status.scored:
        try:
            token_view = agent.token_view()
        except Exception as e:
            error = (error + "\n" if error else "") + f"agent.token_view(): {_describe(e)}"
    scored = status.scored
    total = (reward.total if reward is not None else step_rewards) if scored else None
    ended = time.time()
    return {
        "reward": total,
        "status": status,
        "components": reward.components if (reward is not None and scored) else {},
        "gated_by": reward.gated_by if reward is not None else None,
        "messages": messages,
        "steps": steps,
        "tokens": token_view,
        "n_steps": len(steps),
        "tool_errors": tool_errors,
        "error": error,
        "timings": Timings(
            started_at=started,
            ended_at=ended,
            duration_s=time.perf_counter() - t0,
            agent_s=agent_s,
            env_s=env_s,
            grade_s=grade_s,
        ),
    }
