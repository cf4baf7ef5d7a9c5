"""``Perturbed``: the wrapper that puts perturbations between a ``ToolEnv`` and its tools, and
``perturb(spec, perturbations)``, the spec whose every episode is perturbed.

At ``reset`` the wrapper installs its chain as the unwrapped ``ToolEnv``'s ``interceptor``
(after any chain already there: perturbed specs compose), so every tool call passes through it,
also a subclass's own ``call_tool`` that logs events (``TauEpisode``). Each ``step`` adds the
faults injected during it to ``StepResult.info["faults"]`` (absent when there were none).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import sys
from collections.abc import Sequence
from typing import Any

from envlab.core import (
    Action,
    ConfigError,
    Environment,
    EnvSpec,
    Observation,
    StepResult,
    Task,
    ToolCall,
    ToolEnv,
    ToolResult,
    Wrapper,
)
from envlab.core.toolenv import ToolInterceptor
from envlab.core.wrappers import WrappedSpec
from envlab.envs.perturb.base import CallContext, Perturbation, Proceed
from envlab.envs.perturb.parse import parse_perturbations


def check_env(env: Environment, perturbations: Sequence[Perturbation]) -> ToolEnv:
    """``env`` (unwrapped) if every perturbation can work on it; else a ``ConfigError``."""
    if not isinstance(env, ToolEnv):
        raise ConfigError(
            f"perturbations work on tool environments (a ToolEnv, tools as @tool methods); "
            f"{type(env).__name__} is not one"
        )
    for p in perturbations:
        p.check(env)
    return env


class _Chain:
    """One episode's perturbations, as the ``ToolEnv``'s interceptor."""

    def __init__(self, env: ToolEnv, perturbations: Sequence[Perturbation], seed_key: str) -> None:
        self.links = [(p, p.new_state()) for p in perturbations]
        self.seed_key = seed_key
        self.specs = {t.name: t for t in env.tools}
        self.inner: ToolInterceptor | None = env.interceptor
        self.faults: list[dict[str, Any]] = []
        self.n_calls = 0

    def _run(self, env: ToolEnv, call: ToolCall, call_id: str) -> Proceed:
        inner = self.inner
        if inner is not None:
            return functools.partial(inner, env, call, call_id)
        return functools.partial(env.run_tool, call, call_id)

    async def __call__(self, env: ToolEnv, call: ToolCall, call_id: str) -> ToolResult:
        proceed = self._run(env, call, call_id)
        tool = self.specs.get(call.name)
        if tool is None:  # an unknown tool: the environment's own error, no fault
            return await proceed()
        ctx = CallContext(
            env, call, call_id, tool, env.n_steps, self.n_calls, self.seed_key, self.faults
        )
        self.n_calls += 1
        for p, state in reversed(self.links):  # the first perturbation is the outermost
            proceed = functools.partial(p.apply, ctx, state, proceed)
        return await proceed()

    def take(self) -> list[dict[str, Any]]:
        faults, self.faults = self.faults, []
        return faults


class Perturbed(Wrapper):
    """Every tool call of the episode goes through ``perturbations`` (texts such as
    ``"stale=0.2"``), seeded by the episode's seed and task; faults in ``info["faults"]``."""

    __slots__ = ("_chain", "perturbations")

    def __init__(self, env: Environment, *, perturbations: Sequence[str]) -> None:
        self.env = env
        self.perturbations = parse_perturbations(list(perturbations))
        self._chain: _Chain | None = None

    async def reset(self, task: Task, seed: int | None = None) -> Observation:
        base = check_env(self.env.unwrapped, self.perturbations)
        self._chain = _Chain(base, self.perturbations, f"{seed}:{task.id}")
        base.interceptor = self._chain
        return await self.env.reset(task, seed)

    async def step(self, action: Action) -> StepResult:
        result = await self.env.step(action)
        if self._chain is not None and self._chain.faults:
            result.info.setdefault("faults", []).extend(self._chain.take())
        return result


class PerturbedSpec(WrappedSpec):
    """A spec whose episodes are ``Perturbed``; its hash adds the perturbations (each with
    its parameters) and the source of the modules that implement them."""

    def __init__(self, inner: EnvSpec, perturbations: Sequence[Perturbation]) -> None:
        super().__init__(inner, Perturbed, perturbations=[p.describe() for p in perturbations])
        self.perturbations = list(perturbations)

    def content_hash(self) -> str:
        h = hashlib.sha256(super().content_hash().encode())
        modules = sorted({type(p).__module__ for p in self.perturbations} | {__name__})
        for name in [*modules, "envlab.envs.perturb.base"]:
            h.update(inspect.getsource(sys.modules[name]).encode())
        return h.hexdigest()[:16]


def perturb(spec: EnvSpec, perturbations: Sequence[Perturbation] | str) -> PerturbedSpec:
    """``spec`` with ``perturbations`` (objects, or text such as ``"timeout=0.1,stale=0.2"``)
    on every episode's tool calls. A ``ConfigError`` when the environment is not a ``ToolEnv``
    or lacks what one needs (``stale``: ``snapshot()``/``restore()``)."""
    ps = parse_perturbations(perturbations) if isinstance(perturbations, str) else [*perturbations]
    if not ps:
        raise ConfigError("perturb() needs at least one perturbation")
    check_env(spec.new_episode().unwrapped, ps)  # refused here, not in every episode
    return PerturbedSpec(spec, ps)
