"""One attempt at one episode: reset, steps, grade, close; limits, timeouts, error attribution.

``Attempt.run()`` is the whole story in order; each phase is a method. Who was running when
something failed decides whose failure it is (``EpisodeError.kind``): the agent's (``agent``,
``timeout``), the environment's (``env``) or the machinery's (``infra``, ``engine``). Cancellation
by a deadline and by the caller is handled in one place (``_failed``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from envlab.core import (
    Action,
    Agent,
    AgentSpec,
    Environment,
    EnvSpec,
    EpisodeContext,
    EpisodeError,
    EpisodeTimeExceeded,
    InfraError,
    Limits,
    ModelUnavailable,
    Observation,
    Reward,
    Status,
    StepRecord,
    StepResult,
    Task,
    Timings,
    Trajectory,
    install_agent_clock,
    install_model_failures,
    reset_agent_clock,
    reset_model_failures,
)
from envlab.rollout.actions import check_action
from envlab.rollout.config import EpisodeConfig, EpisodeHooks, describe_exception, wrap_for_limits
from envlab.rollout.deadlines import WAIT, EpisodeClock, deadlines
from envlab.rollout.grading import grade_episode

_DOING = {
    "reset": "the environment was resetting",
    "start": "the agent was starting",
    "act": "the agent was acting",
    "step": "the environment was stepping",
}
_KIND_OF_PHASE = {"reset": "env", "step": "env", "start": "agent", "act": "agent"}
_AGENT_PHASES = frozenset(p for p, kind in _KIND_OF_PHASE.items() if kind == "agent")


class Attempt:
    """One try at an episode; ``run_episode`` retries it on ``infra_error`` and fills in ids."""

    __slots__ = (
        "_engine_index",
        "agent",
        "agent_s",
        "agent_spec",
        "cfg",
        "dl",
        "env",
        "env_s",
        "error",
        "hooks",
        "info",
        "limits",
        "make_agent",
        "me",
        "messages",
        "phase",
        "seed",
        "spec",
        "status",
        "step_rewards",
        "steps",
        "task",
        "tool_errors",
        "tools",
    )

    def __init__(
        self,
        spec: EnvSpec,
        make_agent: Callable[[], Agent],
        agent_spec: AgentSpec,
        task: Task,
        seed: int,
        limits: Limits,
        config: EpisodeConfig,
        hooks: EpisodeHooks | None = None,
    ) -> None:
        self.spec, self.make_agent, self.agent_spec = spec, make_agent, agent_spec
        self.task, self.seed, self.limits, self.cfg, self.hooks = task, seed, limits, config, hooks
        self.env: Environment | None = None
        self.agent: Agent | None = None
        self.messages: list[dict[str, Any]] = []
        self.steps: list[StepRecord] = []
        self.status, self.error = Status.OK, None
        self.info: dict[str, Any] = {}
        self.phase = "engine"  # what runs now: reset, start, act, step, engine
        self.agent_s = self.env_s = 0.0
        self.step_rewards = 0.0
        self.tool_errors = 0
        self._engine_index: list[int] = []  # where each step's action is in self.messages
        self.tools: list[dict[str, Any]] = []

    async def run(self) -> Trajectory:
        started, t0 = time.time(), time.perf_counter()
        me = asyncio.current_task()
        assert me is not None, "an episode must run inside an asyncio task"
        self.me, self.dl = me, (dl := deadlines())
        clock = dl.agent_clock(me, wait_limit=self.cfg.wait_timeout)
        token = install_agent_clock(clock)
        policy = install_model_failures(self.cfg.model_failures)
        try:
            await self._play(clock)
        except asyncio.CancelledError:
            reason = dl.expired(me)
            if reason is None:  # a real cancellation (shutdown, Ctrl-C): release, go on with it
                await _close_quietly(self.env, self.agent)
                raise
            me.uncancel()
            self._timed_out(reason, clock)
        except Exception as e:
            self._failed(e, me, clock)
        finally:
            clock.close()
            reset_agent_clock(token)
            reset_model_failures(policy)
            if dl.clear(me):
                await dl.absorb(me)
        reward, grader_failed, grade_s = await self._grade(me)
        await self._finish(reward)
        duration = time.perf_counter() - t0
        timings = Timings(
            started_at=started,
            ended_at=started + duration,
            duration_s=duration,
            agent_s=self.agent_s,
            env_s=self.env_s,
            grade_s=grade_s,
            waited_s=clock.waited_s,
        )
        return self._trajectory(reward, grader_failed, timings)

    # --- the phases ---------------------------------------------------------------------------
    async def _play(self, clock: EpisodeClock) -> None:
        obs, ctx = await self._reset()
        t = time.perf_counter()
        clock.start()  # the agent's time starts now: building the workspace was not its time
        lim, dl, me = self.limits, self.dl, self.me
        episode_deadline = dl.set(me, lim.episode_timeout_s, "episode", pausable=True)
        self.phase = "start"
        assert self.agent is not None
        await self.agent.start(ctx)
        self.agent_s += time.perf_counter() - t
        while True:
            if lim.step_timeout_s is not None:
                dl.set(
                    me,
                    lim.step_timeout_s,
                    "step",
                    cap=episode_deadline,
                    cap_reason="episode",
                    pausable=True,
                )
            result = await self._step(obs)
            obs = result.observation
            if result.done:
                return
            if result.truncated:
                self.status = Status.TRUNCATED
                return

    async def _reset(self) -> tuple[Observation, EpisodeContext]:
        self.dl.set(self.me, self.limits.reset_timeout_s, "reset")
        t = time.perf_counter()
        self.phase = "start"
        self.agent = self.make_agent()
        self.phase = "reset"
        self.env = env = wrap_for_limits(self.spec.new_episode(), self.limits)
        obs = await env.reset(self.task, self.seed)
        if self.hooks is not None and self.hooks.after_reset is not None:
            self.info["after_reset"] = await _hook(self.hooks.after_reset(env))
        system = env.system_prompt()
        tools = env.tools
        self.tools = [t.openai for t in tools]
        privileged = self.agent_spec.privileged  # hidden data only to a privileged agent
        ctx = EpisodeContext(
            task_id=self.task.id,
            prompt=obs.text,
            tools=tools,
            seed=self.seed,
            system_prompt=system,
            task=self.task if privileged else None,
            oracle_actions=env.oracle_actions(self.task) if privileged else None,
        )
        self.phase = "engine"
        if system:
            self.messages.append({"role": "system", "content": system})
        self.messages.extend(obs.to_messages())
        self.env_s += time.perf_counter() - t
        return obs, ctx

    async def _step(self, obs: Observation) -> StepResult:
        assert self.agent is not None and self.env is not None
        ts = time.perf_counter()
        self.phase = "act"
        action = await self.agent.act(obs)
        if (  # cheap type() checks; anything odd is looked at closely, still in the agent's phase
            type(action) is not Action
            or type(action.text) is not str
            or type(action.tool_calls) is not list
            or type(action.info) is not dict
            or action.tool_calls
            or "message_index" in action.info
            or not action.text.isascii()  # checked for text no encoder can write
        ):
            action = check_action(action)  # a malformed action is the agent's failure
            message = action.to_message()  # dict arguments that JSON cannot encode fail here
        else:
            message = {"role": "assistant", "content": action.text}
        tm = time.perf_counter()
        self.phase = "step"
        result = await self.env.step(action)
        te = time.perf_counter()
        self.phase = "engine"
        self.agent_s += tm - ts
        self.env_s += te - tm
        self._record(action, message, result, tm - ts, te - tm)
        return result

    def _record(
        self,
        action: Action,
        message: dict[str, Any],
        result: StepResult,
        agent_s: float,
        env_s: float,
    ) -> None:
        n_err = result.info.get("tool_errors", 0)
        self.tool_errors += n_err
        self.step_rewards += result.reward
        obs = result.observation
        self.steps.append(
            StepRecord(
                index=len(self.steps),
                message_index=action.info.pop("message_index", None),
                action=action,
                observation=obs,
                reward=result.reward,
                tool_errors=n_err,
                info=result.info,
                agent_s=agent_s,
                env_s=env_s,
            )
        )
        self._engine_index.append(len(self.messages))
        self.messages.append(message)  # what the agent gave, rendered before the env saw it
        self.messages.extend(obs.to_messages())

    async def _grade(self, me: asyncio.Task[Any]) -> tuple[Reward | None, str | None, float]:
        if self.env is None or not self.status.scored:
            return None, None, 0.0
        t = time.perf_counter()
        try:
            reward, grader_failed = await grade_episode(
                self.env, self.task, self.step_rewards, self.limits.grade_timeout_s, me
            )
        except asyncio.CancelledError:
            await _close_quietly(self.env, self.agent)
            raise
        except InfraError as e:  # the grading machinery itself failed: not the agent's
            self.status = Status.INFRA_ERROR
            self.error = EpisodeError(kind="infra", phase="grade", message=describe_exception(e))
            return None, None, time.perf_counter() - t
        if reward.details:  # the verifier's exit code and output tail, why it failed
            self.info["grade"] = reward.details
        return reward, grader_failed, time.perf_counter() - t

    async def _finish(self, reward: Reward | None) -> None:
        """The after-grade hook, then close both parties; a failed close loses nothing."""
        if self.env is not None and self.hooks is not None and self.hooks.after_grade is not None:
            self.info["after_grade"] = await _hook(self.hooks.after_grade(self.env, reward))
        problems: list[str] = []
        for party, name in ((self.env, "env"), (self.agent, "agent")):
            if party is None:
                continue
            try:
                await party.close()
            except Exception as e:
                problems.append(f"{name}.close(): {describe_exception(e)}")
        if problems:
            self.info["close_errors"] = problems

    # --- failures -----------------------------------------------------------------------------
    def _failed(self, e: Exception, me: asyncio.Task[Any], clock: EpisodeClock) -> None:
        reason = self.dl.expired(me)  # the party may have turned our cancel into its error
        if reason is not None:
            me.uncancel()
            self._timed_out(reason, clock)
            return
        message = describe_exception(e)
        if isinstance(e, EpisodeTimeExceeded):
            self.status = Status.TIMEOUT
            self.error = EpisodeError(kind="timeout", phase=self.phase, message=message)
        elif isinstance(e, ModelUnavailable) and self.phase in _AGENT_PHASES:
            self._model_failed(message)
        elif isinstance(e, InfraError) and self.phase not in _AGENT_PHASES:
            # the environment's sandbox, a simulated user's or a judge's model: the machinery's
            self.status = Status.INFRA_ERROR
            self.error = EpisodeError(kind="infra", phase=self.phase, message=message)
        elif isinstance(e, InfraError):  # an agent claiming an outage: only envlab's transport may
            self.status = Status.AGENT_ERROR
            headline, _, rest = message.partition("\n")
            message = (
                f"{headline} (raised by the agent in {self.phase}(): only envlab's model transport "
                "may declare an infrastructure failure from an agent, with ModelUnavailable; any "
                f"other InfraError from an agent is its own failure, scored 0)\n{rest}"
            )
            self.error = EpisodeError(kind="agent", phase=self.phase, message=message)
        elif self.phase in _KIND_OF_PHASE:
            kind = _KIND_OF_PHASE[self.phase]
            self.status = Status.ENV_ERROR if kind == "env" else Status.AGENT_ERROR
            self.error = EpisodeError(kind=kind, phase=self.phase, message=message)  # type: ignore[arg-type]
        else:  # a bug in the engine is infrastructure, not the agent's failure
            self.status = Status.INFRA_ERROR
            self.error = EpisodeError(kind="engine", phase="engine", message=message)

    def _model_failed(self, message: str) -> None:
        """The agent's own model endpoint failed past its retries: the agent's failure (scored
        0), or, in a run that excludes model failures (a trusted endpoint), ``infra_error``."""
        if self.cfg.model_failures == "exclude":
            self.status = Status.INFRA_ERROR
            note = "excluded: this run excludes model failures (--model-failures exclude)"
        else:
            self.status = Status.AGENT_ERROR
            note = (
                "the agent's failure, scored 0: the agent is model + harness + operations; a run "
                "on a trusted endpoint of its own may exclude these (--model-failures exclude)"
            )
        headline, _, rest = message.partition("\n")
        message = f"{headline} ({note})\n{rest}"
        self.error = EpisodeError(kind="model", phase=self.phase, message=message)

    def _timed_out(self, reason: str, clock: EpisodeClock) -> None:
        """Which limit fired, its value and what was running; only the agent's own limits
        (step, episode) are its failure."""
        lim, n = self.limits, len(self.steps)
        where = f"while {_DOING.get(self.phase, 'the engine was between steps')}"
        waited = (
            f" ({clock.waited_s:.1f}s of waiting for shared resources not counted)"
            if clock.waited_s >= 0.05
            else ""
        )
        status, kind = Status.TIMEOUT, "timeout"
        if reason == "reset":
            status, kind = Status.INFRA_ERROR, "infra"
            msg = f"reset took longer than reset_timeout_s={lim.reset_timeout_s}s {where}"
        elif reason.startswith(WAIT):
            status, kind = Status.INFRA_ERROR, "infra"
            msg = (
                f"waited longer than wait_timeout={self.cfg.wait_timeout}s in all for shared "
                f"resources (last: {reason.removeprefix(WAIT)}) at step {n} {where}: the "
                "machinery is overloaded, not the agent slow; run fewer episodes at once "
                "(--concurrency) or give the model more capacity"
            )
        elif reason == "step":
            msg = f"step {n} took longer than step_timeout_s={lim.step_timeout_s}s {where}{waited}"
        else:
            msg = (
                f"the episode took longer than episode_timeout_s={lim.episode_timeout_s}s, at "
                f"step {n} {where}{waited}"
            )
        self.status = status
        self.error = EpisodeError(kind=kind, phase=self.phase, message=msg)  # type: ignore[arg-type]

    # --- the record ---------------------------------------------------------------------------
    def _trajectory(
        self, reward: Reward | None, grader_failed: str | None, timings: Timings
    ) -> Trajectory:
        scored = self.status.scored
        messages, tokens = self.messages, None
        if self.agent is not None:
            transcript = self._ask_agent("transcript", self.agent.transcript)
            if transcript is not None:
                messages = transcript  # what the model received: the on-policy record
            else:  # no model: the observations and actions are the transcript
                for step, index in zip(self.steps, self._engine_index, strict=True):
                    step.message_index = index
            if scored:
                tokens = self._ask_agent("token_view", self.agent.token_view)
        valid = reward is not None and scored
        return Trajectory(
            episode_id="",
            task_id=self.task.id,
            group_id="",
            sample_index=0,
            reward=reward.total if valid else None,  # type: ignore[union-attr]
            status=self.status,
            env_id="",
            env_hash="",
            seed=self.seed,
            agent=self.agent_spec,
            components=reward.components if valid else {},  # type: ignore[union-attr]
            gated_by=reward.gated_by if reward is not None else None,
            messages=messages,
            tools=self.tools,
            steps=self.steps,
            tokens=tokens,
            n_steps=len(self.steps),
            tool_errors=self.tool_errors,
            error=self.error,
            grader_failed=grader_failed if scored else None,
            info=self.info,
            timings=timings,
        )

    def _ask_agent(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as e:  # a broken record loses nothing else
            self.info.setdefault("agent_record_errors", []).append(
                f"agent.{what}(): {describe_exception(e)}"
            )
            return None


async def _hook(aw: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    try:
        return await aw
    except Exception as e:
        return {"hook_error": describe_exception(e)}


async def _close_quietly(env: Environment | None, agent: Agent | None) -> None:
    """Release what an episode holds even when it is being cancelled (sandboxes, servers)."""
    for party in (env, agent):
        if party is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(party.close())
