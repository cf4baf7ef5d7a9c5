"""τ-bench's side of ``bench/tau.py``: run with the python of the bench's own τ-bench virtualenv
(never imported by envlab). Reads one JSON request a line on stdin and answers one JSON line on
stdout; each operation is timed here, so the pipe's cost is in no figure.

Episodes are made as τ-bench's ``run.py`` makes each one (``get_env(...)`` with ``task_index``,
then ``env.reset(task_index)``) with the ``human`` user strategy, whose constructor makes no call;
its ``reset``/``step`` read stdin, so before ``reset`` the user is replaced by ``NoNetworkUser``:
the instruction as the opening, "ok" to every message, ``###STOP###`` to the last one.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from tau_bench.envs import get_env
from tau_bench.envs.base import Env
from tau_bench.envs.user import BaseUserSimulationEnv
from tau_bench.types import Action

STOP = "###STOP###"


class NoNetworkUser(BaseUserSimulationEnv):
    def __init__(self) -> None:
        self.last: str | None = None

    def reset(self, instruction: str | None = None) -> str:
        return instruction or ""

    def step(self, content: str) -> str:
        return STOP if content == self.last else "ok"

    def get_total_cost(self) -> float:
        return 0.0


def new_episode(domain: str, index: int) -> Env:
    """An episode as ``run.py`` starts one: a fresh env (its data loaded), then ``reset``."""
    env = get_env(domain, "human", "none", "test", task_index=index)
    env.user = NoNetworkUser()
    env.reset(task_index=index)
    return env


def replay(domain: str, index: int, actions: list[dict[str, Any]]) -> float:
    """One episode: every action through ``Env.step`` until it says done; the reward is what
    ``step`` computes then (``calculate_reward``: a fresh data load, the gold actions replayed,
    both data hashed, the outputs looked for in what the agent said)."""
    env = new_episode(domain, index)
    said = [a["kwargs"]["content"] for a in actions if a["name"] == "respond"]
    env.user.last = said[-1] if said else None  # type: ignore[attr-defined]
    for a in actions:
        res = env.step(Action(name=a["name"], kwargs=a["kwargs"]))
        if res.done:
            return float(res.reward)
    return 0.0


def timed(fn: Any, args: list[Any]) -> tuple[list[float], list[Any]]:
    times, out = [], []
    for a in args:
        t = time.perf_counter()
        out.append(fn(*a))
        times.append(time.perf_counter() - t)
    return times, out


def handle(req: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    op, domain = req["op"], state.get("domain")
    if op == "init":
        state["domain"] = req["domain"]
        state["env"] = new_episode(req["domain"], 0)  # imports the tasks and tools once
        return {"user_ids": [t.user_id for t in state["env"].tasks]}
    if op == "noop":
        return {}
    if op == "noop_step":
        env = state["env"]
        noop = Action(name="no_such_tool", kwargs={})
        return {"times": timed(env.step, [[noop]] * req["n"])[0]}
    if op == "data":
        return {"times": timed(state["env"].data_load_func, [[]] * req["n"])[0]}
    if op == "reset":
        return {"times": timed(new_episode, [[domain, i] for i in req["tasks"]])[0]}
    if op == "replay":
        args = [[domain, e["index"], e["actions"]] for e in req["episodes"]]
        times, rewards = timed(replay, args)
        return {"times": times, "rewards": rewards}
    raise ValueError(f"unknown op {op!r}")


def main() -> None:
    out = os.fdopen(os.dup(1), "w")  # the answers; whatever else prints goes to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    state: dict[str, Any] = {}
    for line in sys.stdin:
        out.write(json.dumps(handle(json.loads(line), state)) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
