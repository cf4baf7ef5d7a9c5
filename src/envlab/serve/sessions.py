"""The server's sessions: each owns at most one live episode at a time (a fresh environment and
its sandbox), with the spec's limits applied by the engine's own wrappers.

A session is opened by a ``/ws`` connection (or by ``POST /reset`` without a session id) and
holds one episode at a time: a reset closes the previous episode, if any, and starts a fresh one
(``spec.new_episode()``), as OpenEnv's clients expect of a connection. The step that ends the
episode (done, truncated by ``max_steps``, or the agent past its time) is graded here, on the
server, after the agent's last action, by the engine's rule (``rollout.grading.grade_episode``:
a valid reward, one regrade; a grader that fails twice scores 0 with ``grader_failed``); then the
environment is closed at once. Nothing here imports FastAPI.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any

from envlab.core import (
    Environment,
    EnvSpec,
    EpisodeOrderError,
    EpisodeTimeExceeded,
    InfraError,
    Limits,
    NotFoundError,
    Observation,
    Task,
    TaskSet,
    Wrapper,
)
from envlab.rollout.config import describe_exception, wrap_for_limits
from envlab.rollout.deadlines import deadlines
from envlab.rollout.grading import grade_episode
from envlab.serve import wire
from envlab.serve.wire import WireError

log = logging.getLogger("envlab.serve")


class CapacityError(Exception):
    """The server already holds its maximum of sessions."""

    def __init__(self, active: int, max_sessions: int) -> None:
        super().__init__(
            f"session refused: the server holds {active} sessions, its maximum "
            f"(--max-sessions {max_sessions}); close a session first, or start the server "
            f"with a larger --max-sessions"
        )
        self.active, self.max_sessions = active, max_sessions


class Session:
    """One client's session: one episode at a time, driven frame by frame."""

    __slots__ = (
        "busy",
        "closed",
        "ended",
        "env",
        "episode_id",
        "final_state",
        "id",
        "kind",
        "last_active",
        "limits",
        "manager",
        "on_idle",
        "seed",
        "step_count",
        "step_rewards",
        "task",
    )

    def __init__(self, manager: SessionManager, kind: str) -> None:
        self.manager, self.kind = manager, kind
        self.id = secrets.token_urlsafe(16)
        self.env: Environment | None = None
        self.task: Task | None = None
        self.limits: Limits | None = None
        self.seed: int | None = None
        self.episode_id: str | None = None
        self.step_count = 0
        self.step_rewards = 0.0
        self.ended = False
        self.closed = False
        self.busy = False
        self.on_idle: Callable[[], None] | None = None
        """How an idle session is told (a /ws handler's); ``None``: it is closed."""
        self.final_state: dict[str, Any] = {}
        self.last_active = time.monotonic()

    # --- frames --------------------------------------------------------------------------------
    async def reset(self, data: dict[str, Any]) -> dict[str, Any]:
        """Start a fresh episode (closing the previous one); the reset frame's data."""
        req = wire.parse_reset(data)
        task = self.manager.pick_task(req)
        spec = self.manager.spec
        self.busy = True  # from here: a concurrent HTTP request on this session is refused
        try:
            await self.close_episode()
            self.limits = limits = self.manager.overrides.over(spec.limits(task))
            self.task, self.seed, self.episode_id = task, req.seed, req.episode_id
            self.step_count, self.step_rewards, self.ended, self.final_state = 0, 0.0, False, {}
            env = self.env = wrap_for_limits(spec.new_episode(), limits)
            self.manager.live_episodes += 1
            obs = await _within(env.reset(task, req.seed), limits.reset_timeout_s, "reset")
            tools = [t.openai for t in env.tools]
            system = env.system_prompt()
        except BaseException as e:
            await self.close_episode()
            raise _as_wire_error(e, "reset") from None
        finally:
            self.busy = False
            self.touch()
        meta: dict[str, Any] = {"task_id": task.id, "seed": req.seed, "episode_id": req.episode_id}
        if req.ignored_keys():
            meta["ignored_reset_keys"] = req.ignored_keys()
        return wire.observation_to_wire(
            obs, reward=None, done=False, tools=tools, system_prompt=system, metadata=meta
        )

    async def step(self, data: dict[str, Any]) -> dict[str, Any]:
        """Apply the client's action; the observation frame's data (graded if it ends)."""
        action = wire.action_from_wire(data)
        env = self.env
        if env is None or self.ended:
            what = "after the episode ended" if self.ended else "before reset"
            raise WireError(
                f"step {what}: send a reset frame to start an episode", wire.EPISODE_ORDER
            )
        assert self.limits is not None
        self.busy = True
        try:
            result = await _within(env.step(action), self.limits.step_timeout_s, "step")
        except (EpisodeTimeExceeded, _StepTooSlow) as e:  # the agent's time: graded, scored
            return await self._end(None, "timeout", {"error": str(e)})
        except BaseException as e:
            await self.close_episode()
            self.ended = True
            raise _as_wire_error(e, "step") from None
        finally:
            self.busy = False
            self.touch()
        self.step_count += 1
        self.step_rewards += result.reward
        if result.done or result.truncated:
            status = "ok" if result.done else "truncated"
            return await self._end(result, status, {})
        return wire.observation_to_wire(
            result.observation,
            reward=result.reward,
            done=False,
            info=result.info,
            metadata={"status": "running"},
        )

    def state(self) -> wire.StateData:
        self.touch()
        env_state = self.final_state
        if self.env is not None:
            with contextlib.suppress(Exception):
                env_state = self.env.state()
        return wire.StateData(
            episode_id=self.episode_id,
            step_count=self.step_count,
            task_id=None if self.task is None else self.task.id,
            done=self.ended,
            env=wire._jsonable(env_state),
        )

    # --- the end -------------------------------------------------------------------------------
    async def _end(self, result: Any, status: str, meta: dict[str, Any]) -> dict[str, Any]:
        env, task, limits = self.env, self.task, self.limits
        assert env is not None and task is not None and limits is not None
        self.ended = True
        self.busy = True
        try:
            me = asyncio.current_task()
            assert me is not None
            reward, failed = await grade_episode(
                env, task, self.step_rewards, limits.grade_timeout_s, me
            )
            with contextlib.suppress(Exception):
                self.final_state = env.state()
        except BaseException as e:
            raise _as_wire_error(e, "grade") from None
        finally:
            self.busy = False
            await self.close_episode()
            self.touch()
        obs = result.observation if result is not None else _EMPTY_OBS
        return wire.observation_to_wire(
            obs,
            reward=None,
            done=True,
            truncated=status != "ok",
            info=None if result is None else result.info,
            graded=reward,
            grader_failed=failed,
            metadata={**meta, "status": status, "steps": self.step_count},
        )

    async def close_episode(self) -> None:
        """Close the live episode, if any (its sandbox goes at once)."""
        env, self.env = self.env, None
        if env is None:
            return
        self.manager.live_episodes -= 1
        if _nothing_to_close(env):
            return
        try:
            await asyncio.shield(env.close())  # a cancelled session still frees its sandbox
        except Exception as e:
            log.warning("closing an episode of session %s failed: %s", self.id, e)

    def touch(self) -> None:
        self.last_active = time.monotonic()


class SessionManager:
    """The server's sessions: at most ``max_sessions``, idle ones reaped after ``idle_timeout``;
    each episode's limits are ``limits.over(spec.limits(task))``."""

    def __init__(
        self,
        spec: EnvSpec,
        *,
        max_sessions: int = 64,
        idle_timeout: float = 600.0,
        limits: Limits | None = None,
    ) -> None:
        self.spec, self.max_sessions, self.idle_timeout = spec, max_sessions, idle_timeout
        self.overrides = limits or Limits.overrides()
        """The user's limits, set over each task's own (as ``envlab eval`` does)."""
        self.sessions: dict[str, Session] = {}
        self.live_episodes = 0
        self.reaped = 0
        self._tasks: dict[tuple[int, str], TaskSet] = {}
        self._reaper: asyncio.Task[None] | None = None

    def open(self, kind: str) -> Session:
        if len(self.sessions) >= self.max_sessions:
            raise CapacityError(len(self.sessions), self.max_sessions)
        s = Session(self, kind)
        self.sessions[s.id] = s
        return s

    async def close(self, session: Session) -> None:
        session.closed = True
        self.sessions.pop(session.id, None)
        await session.close_episode()

    async def close_all(self) -> None:
        for s in list(self.sessions.values()):
            await self.close(s)

    def tasks(self, seed: int = 0, split: str = "test") -> TaskSet:
        key = (seed, split)
        ts = self._tasks.get(key)
        if ts is None:
            ts = self._tasks[key] = self.spec.tasks(seed=seed, split=split)
        return ts

    def pick_task(self, req: wire.ResetData) -> Task:
        tasks = self.tasks(req.task_seed, req.split)
        if req.task_id is not None:
            try:
                return tasks.by_id(req.task_id)
            except NotFoundError as e:
                raise WireError(str(e)) from None
        if not len(tasks):
            raise WireError(f"the environment has no tasks in split {req.split!r}")
        return tasks[(req.seed or 0) % len(tasks)]

    # --- idle reaping -------------------------------------------------------------------------
    def start_reaper(self) -> None:
        if self._reaper is None:
            self._reaper = asyncio.get_running_loop().create_task(self._reap_forever())

    async def stop_reaper(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None

    async def reap_idle(self) -> int:
        """Close the sessions silent for more than ``idle_timeout`` (a /ws session is told
        first, by its handler) and not in the middle of a frame; how many."""
        now, n = time.monotonic(), 0
        for s in list(self.sessions.values()):
            if s.busy or s.closed or now - s.last_active <= self.idle_timeout:
                continue
            if s.on_idle is not None:
                s.on_idle()
                s.on_idle = None
            else:
                await self.close(s)
            n += 1
        self.reaped += n
        return n

    async def _reap_forever(self) -> None:
        tick = min(max(self.idle_timeout / 4, 0.05), 5.0)
        while True:
            await asyncio.sleep(tick)
            try:
                await self.reap_idle()
            except Exception as e:  # keep reaping
                log.warning("reaping idle sessions failed: %s", e)


def _nothing_to_close(env: Environment) -> bool:
    """True when no layer of ``env`` (wrappers included) overrides ``close``: the base no-op
    needs neither awaiting nor shielding (a task per episode less)."""
    while True:
        close = type(env).close
        if isinstance(env, Wrapper):
            if close is not Wrapper.close:
                return False
            env = env.env
        else:
            return close is Environment.close


class _StepTooSlow(Exception):
    pass


_EMPTY_OBS = Observation()


async def _within(aw: Any, seconds: float | None, what: str) -> Any:
    """``await aw`` within ``seconds``, on the engine's deadline watchdog (one timer task per
    event loop rather than a timer per call); a step too slow is the agent's, a reset too slow
    the machinery's."""
    if seconds is None:
        return await aw
    me = asyncio.current_task()
    assert me is not None
    dl = deadlines()
    dl.set(me, seconds, what)
    try:
        return await aw
    except (asyncio.CancelledError, Exception):
        if dl.expired(me) is None:  # not our deadline: goes on as it is
            raise
        me.uncancel()
        if what == "step":
            raise _StepTooSlow(f"the step took longer than step_timeout_s={seconds}s") from None
        raise InfraError(f"{what} took longer than {what}_timeout_s={seconds}s") from None
    finally:
        if dl.clear(me):
            await dl.absorb(me)


def _as_wire_error(e: BaseException, phase: str) -> BaseException:
    """The error frame for an exception of the environment or the machinery in ``phase``."""
    if isinstance(e, WireError | asyncio.CancelledError | KeyboardInterrupt | SystemExit):
        return e
    if isinstance(e, EpisodeOrderError):
        return WireError(str(e), wire.EPISODE_ORDER)
    if isinstance(e, InfraError):
        return WireError(f"{phase}: {e}", wire.INFRA_ERROR)
    return WireError(f"the environment raised in {phase}: {describe_exception(e)}", wire.ENV_ERROR)


__all__ = ["CapacityError", "Session", "SessionManager"]
