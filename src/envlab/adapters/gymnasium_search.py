"""The best return of one seeded toy-text episode, found by playing the environment itself.

A toy-text episode is a function of its seed and its actions, so the best an agent can do on a
task (a seed) is found by search over copies of the live environment (``copy.deepcopy``, its
read-only tables shared), never by a model of its rules. The search is breadth-first by step;
two copies with the same observation and the same random-generator state are the same node
(the better return kept). With ``shortest_is_best`` (every reward before the final one is <= 0,
true of FrozenLake, Taxi and CliffWalking) it stops at the first step where an episode ends above
the worst return; otherwise (Blackjack) it searches every step up to ``max_steps``.
"""

from __future__ import annotations

import copy
import pickle
from dataclasses import dataclass, field
from typing import Any

SHARED = ("P", "desc", "initial_state_distrib", "observation_space", "action_space", "spec")
"""Attributes a step never changes, shared by the copies instead of copied."""


@dataclass(slots=True)
class Node:
    env: Any
    ret: float
    actions: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Plan:
    """The best return found and the actions that reach it."""

    best: float
    actions: tuple[int, ...]
    ended: bool
    """Whether the plan ends the episode (terminated) within the step limit."""


def _clone(env: Any) -> Any:
    memo = {id(getattr(env, name)): getattr(env, name) for name in SHARED if hasattr(env, name)}
    return copy.deepcopy(env, memo)


def _key(obs: Any, env: Any) -> bytes:
    return pickle.dumps((obs, env.np_random.bit_generator.state))


def best_plan(
    env: Any, n_actions: int, max_steps: int, worst: float, shortest_is_best: bool
) -> Plan:
    """The best return reachable from ``env`` (an unwrapped environment, just reset) within
    ``max_steps`` steps, and its actions; ``worst`` is the lowest return an episode can have."""
    frontier = {b"": Node(env, 0.0)}
    best: Plan | None = None
    for _ in range(max_steps):
        nxt: dict[bytes, Node] = {}
        for node in frontier.values():
            for action in range(n_actions):
                child = _clone(node.env)
                obs, reward, terminated, _, _ = child.step(action)
                ret, actions = node.ret + float(reward), [*node.actions, action]
                if terminated:
                    if best is None or ret > best.best:
                        best = Plan(ret, tuple(actions), True)
                    continue
                key = _key(obs, child)
                if key not in nxt or nxt[key].ret < ret:
                    nxt[key] = Node(child, ret, actions)
        frontier = nxt
        if not frontier or (shortest_is_best and best is not None and best.best > worst):
            break
    else:  # the step limit reached: episodes still running there are truncated
        for node in frontier.values():
            if best is None or node.ret > best.best:
                best = Plan(node.ret, tuple(node.actions), False)
    return best if best is not None else Plan(worst, (), False)
