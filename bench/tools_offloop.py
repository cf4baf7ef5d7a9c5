"""Tools off the event loop: what a thread costs a cheap tool, what it saves everyone else.

Side by side in one run:

1. Per-call cost on a cheap tool (median of rounds, interleaved): inline on the loop (the old
   ``ToolEnv``), ``asyncio.to_thread``, ``run_in_executor`` on a dedicated pool, envlab's
   ``run_in_thread`` (pool + watchdog + budget), a process pool (pure functions only), and the
   whole ``ToolEnv.run_tool`` new vs old.
2. Loop latency while one CPU-bound tool runs (a ticker's worst lateness): pure Python inline
   vs in a thread (the GIL changes hands every ``sys.getswitchinterval()``), and a GIL-holding
   C operation (a big-int long division) in a thread: no thread helps there, hence the cost
   model of ``calculate`` (``core.arith_cost``).
3. Eight honest τ-retail episodes (30 paced ``calculate`` steps each) alone and beside one
   hostile episode that sends a 5 KB ``calculate`` of costly terms hidden under true
   divisions, through the engine (``run_episodes``) and through ``envlab serve`` (``RemoteEnv``):
   the time until the honest eight finished, for the fixed code (cost model, tools in threads)
   and the old one (per-operand check; tools inline on the loop, or in threads). ``--terms``
   scales the old code's hostile (each term ~0.3 s of CPU; the new code gets the full 5 KB).
   The old calculate in a thread stalls the others nearly as much as inline: one ``eval`` of
   a straight expression never gives the GIL up between its operations (nor lets the
   watchdog run), which is why ``calculate`` is priced before it runs.

    python bench/tools_offloop.py --terms 12
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any

from envlab.core import (
    Action,
    Agent,
    AgentClass,
    AgentSpec,
    Component,
    EnvSpec,
    Limits,
    Observation,
    Rubric,
    Task,
    ToolCall,
    ToolCallError,
    ToolEnv,
)
from envlab.core.tool_budget import ToolBudget, run_in_thread
from envlab.core.tools import tool
from envlab.envs.tau.common import _CALC_CHARS
from envlab.envs.tau.spec import RetailEpisode, TauRetail
from envlab.rollout import EpisodeConfig, PlannedEpisode, episode_ids, run_episodes

TERM = "255**124999//255**62499/255**62500"
FULL_TERMS = 5000 // (len(TERM) + 3)


class PacedAgent(Agent):
    """Plays its actions, each after 10 ms (a fast model's turn), then says it is done."""

    def __init__(self, actions: list[Action]) -> None:
        self.actions = list(actions)

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name="paced")

    async def act(self, observation: Observation) -> Action:
        await asyncio.sleep(0.01)
        return self.actions.pop(0) if self.actions else Action(text="ok")


def _cheap() -> int:
    return 1 + 1


# -- 1. per-call cost ---------------------------------------------------------------------------


async def _per_call(n: int, rounds: int) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    dedicated, procs = ThreadPoolExecutor(1), ProcessPoolExecutor(1)
    budget = ToolBudget()
    new_env, old_env = await _cheap_env(CheapEpisode), await _cheap_env(InlineCheapEpisode)
    call = ToolCall("cheap", {})

    async def inline() -> None:
        _cheap()

    ways: dict[str, Callable[[], Any]] = {
        "inline": inline,
        "asyncio.to_thread": lambda: asyncio.to_thread(_cheap),
        "run_in_executor(dedicated)": lambda: loop.run_in_executor(dedicated, _cheap),
        "run_in_thread (envlab)": lambda: run_in_thread(_cheap, budget),
        "process pool": lambda: loop.run_in_executor(procs, _cheap),
        "ToolEnv.run_tool old (inline)": lambda: old_env.run_tool(call),
        "ToolEnv.run_tool new (thread)": lambda: new_env.run_tool(call),
    }
    await loop.run_in_executor(procs, _cheap)  # start the process
    samples: dict[str, list[float]] = {k: [] for k in ways}
    for r in range(rounds + 1):  # the first round warms up, not counted
        for name, way in ways.items():
            count = n // 10 if name == "process pool" else n
            t = time.perf_counter()
            for _ in range(count):
                await way()
            if r:
                samples[name].append((time.perf_counter() - t) / count * 1e6)
    dedicated.shutdown()
    procs.shutdown()
    return {k: statistics.median(v) for k, v in samples.items()}


class CheapEpisode(ToolEnv):
    rubric = Rubric([Component("one", lambda ctx: 1.0)])

    @tool
    def cheap(self) -> str:
        """A cheap tool."""
        return str(_cheap())


class InlineCheapEpisode(CheapEpisode):
    """The old ``ToolEnv``: a sync tool runs on the event loop."""

    async def _invoke(self, name: str, method: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        value = method(**kwargs)
        return await value if asyncio.iscoroutine(value) else value


async def _cheap_env(cls: type[ToolEnv]) -> ToolEnv:
    env = cls()
    await env.reset(Task(id="t", prompt="p", answer=""))
    return env


# -- 2. loop latency while a CPU-bound tool runs ------------------------------------------------


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def _bigint_division() -> None:
    eval(TERM, {"__builtins__": None}, {})


async def _lag_while(run: Callable[[], Any]) -> tuple[float, float]:
    """(median, worst) lateness in ms of a 1 ms ticker on the loop while ``run()`` is awaited."""
    lags: list[float] = []
    stop = False

    async def ticker() -> None:
        while not stop:
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append((time.perf_counter() - t - 0.001) * 1e3)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    await run()
    stop = True
    await task
    return statistics.median(lags), max(lags)


async def _latency(seconds: float) -> dict[str, tuple[float, float]]:
    async def inline() -> None:
        _spin(seconds)

    budget = ToolBudget(None, None)
    return {
        f"pure-Python spin {seconds:g}s, inline": await _lag_while(inline),
        f"pure-Python spin {seconds:g}s, thread": await _lag_while(
            lambda: run_in_thread(lambda: _spin(seconds), budget)
        ),
        "one big-int long division (~0.3 s), thread": await _lag_while(
            lambda: run_in_thread(_bigint_division, budget)
        ),
    }


# -- 3. honest episodes beside a hostile calculate ---------------------------------------------


def _old_int_bits(node: ast.AST, bits: dict[int, int | None]) -> int | None:
    """The pre-fix per-operand bound (nothing above a true division was looked at)."""
    if isinstance(node, ast.Constant):
        return node.value.bit_length() if isinstance(node.value, int) else None
    if isinstance(node, ast.UnaryOp):
        return bits[id(node.operand)]
    if not isinstance(node, ast.BinOp):
        return None
    left, right = bits[id(node.left)], bits[id(node.right)]
    if left is None or right is None or isinstance(node.op, ast.Div):
        return None
    if isinstance(node.op, ast.Pow):
        exact = isinstance(node.right, ast.Constant)
        exponent = node.right.value if exact else 2 ** min(right, 64)  # type: ignore[attr-defined]
        bound = left * exponent if left > 1 else 1
    elif isinstance(node.op, ast.Mult):
        bound = left + right
    else:
        bound = max(left, right) + 1
    if bound > 1_000_000:
        raise OverflowError("int too large to convert to float")
    return bound


class OldCalcThreadEpisode(RetailEpisode):
    """τ-retail with the pre-fix ``calculate`` (tools still in threads)."""

    @tool
    def calculate(self, expression: str) -> str:
        """Calculate the result of a mathematical expression.

        Args:
            expression: The mathematical expression to calculate.
        """
        if not all(char in _CALC_CHARS for char in expression):
            raise ToolCallError("invalid characters in expression")
        try:
            tree = ast.parse(expression.lstrip(" \t"), "<string>", "eval")
            bits: dict[int, int | None] = {}
            for node in _post_order(tree.body):
                bits[id(node)] = _old_int_bits(node, bits)
            return str(round(float(eval(expression, {"__builtins__": None}, {})), 2))
        except Exception as e:
            raise ToolCallError(str(e)) from None


def _post_order(root: ast.AST) -> list[ast.AST]:
    out, stack = [], [root]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out[::-1]


class OldCalcInlineEpisode(OldCalcThreadEpisode):
    """The pre-fix engine: the pre-fix ``calculate``, run inline on the event loop."""

    _invoke = InlineCheapEpisode._invoke


def _spec(episode: type[RetailEpisode]) -> EnvSpec:
    return type(f"Bench{episode.__name__}", (TauRetail,), {"environment": episode})()


HONEST = ["(1200 - 2 * 50) / 3", "99.99 * 3 + 12.5", "(1 + 0.08) ** 12 * 1000", "2 ** 10 / 7"]


def _plans(spec: EnvSpec, hostile: str | None) -> list[PlannedEpisode]:
    tasks = list(spec.tasks(n=9))
    plans = []
    for i, t in enumerate(tasks[:8]):
        script = [
            Action(tool_calls=[ToolCall("calculate", {"expression": HONEST[k % 4]}, id=f"c{k}")])
            for k in range(30)
        ]
        ids = episode_ids(spec.name, spec.content_hash(), t.id, 0, i)
        plans.append(PlannedEpisode(t, i, ids, AgentClass(PacedAgent, script)))
    if hostile is not None:
        t = tasks[8]
        script = [Action(tool_calls=[ToolCall("calculate", {"expression": hostile})])]
        ids = episode_ids(spec.name, spec.content_hash(), t.id, 0, 99)
        plans.append(PlannedEpisode(t, 99, ids, AgentClass(PacedAgent, script)))
    return plans


async def _honest_time(spec: EnvSpec, hostile: str | None) -> tuple[float, str]:
    """Seconds until the eight honest episodes ended; the statuses, hostile last."""
    done: dict[int, float] = {}
    t0 = time.perf_counter()
    cfg = EpisodeConfig(overrides=Limits.overrides(max_steps=30), max_retries=0)
    trajs = await run_episodes(
        spec,
        _plans(spec, hostile),
        config=cfg,
        concurrency=9,
        on_trajectory=lambda p, _: done.setdefault(p.sample_index, time.perf_counter() - t0),
    )
    honest = max(v for k, v in done.items() if k < 8)
    statuses = [f"{t.status.value}" for t in trajs]
    summary = f"honest {sorted(set(statuses[:8]))}"
    if hostile is not None:
        h = trajs[8]
        summary += f", hostile {h.status.value} reward={h.reward} tool_errors={h.tool_errors}"
    return honest, summary


async def _served_time(episode: type[RetailEpisode], hostile: str | None) -> tuple[float, str]:
    from envlab.envs import load_env
    from envlab.serve.server import ServerThread

    with ServerThread(_spec(episode)) as srv:
        return await _honest_time(load_env(f"ws://{srv.host}:{srv.port}"), hostile)


async def _side_by_side(terms: int, serve: bool) -> None:
    full = " + ".join([TERM] * FULL_TERMS)
    scaled = " + ".join([TERM] * terms)
    rows: list[tuple[str, Callable[[], Any]]] = []
    for where, run in (("engine", _local), ("serve", _served_time)):
        if where == "serve" and not serve:
            continue
        rows += [
            (f"{where}: 8 honest alone", lambda r=run: r(RetailEpisode, None)),
            (f"{where}: + hostile, fixed (5 KB)", lambda r=run: r(RetailEpisode, full)),
            (
                f"{where}: + hostile, old calculate in threads ({terms} terms)",
                lambda r=run: r(OldCalcThreadEpisode, scaled),
            ),
            (
                f"{where}: + hostile, old engine: inline ({terms} terms)",
                lambda r=run: r(OldCalcInlineEpisode, scaled),
            ),
        ]
    await _local(RetailEpisode, None)  # warm up: the pristine database, imports
    base: dict[str, float] = {}
    for name, make in rows:
        seconds, summary = await make()
        where = name.split(":")[0]
        base.setdefault(where, seconds)
        ratio = seconds / base[where]
        print(f"  {name:58s} {seconds:7.2f} s  x{ratio:6.2f}   {summary}")


async def _local(episode: type[RetailEpisode], hostile: str | None) -> tuple[float, str]:
    return await _honest_time(_spec(episode), hostile)


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--calls", type=int, default=2000, help="cheap calls per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--spin", type=float, default=1.0, help="seconds of the CPU-bound tool")
    p.add_argument("--terms", type=int, default=12, help="the old code's hostile, in terms")
    p.add_argument("--no-serve", action="store_true")
    args = p.parse_args()
    print(f"python {sys.version.split()[0]}, switch interval {sys.getswitchinterval() * 1e3} ms")
    print("\n1. per call, cheap tool (us, median of rounds)")
    costs = await _per_call(args.calls, args.rounds)
    for name, us in costs.items():
        print(f"  {name:32s} {us:9.1f} us  x{us / costs['inline']:8.1f} of inline")
    print("\n2. loop lateness while one CPU-bound tool runs (1 ms ticker: median / worst, ms)")
    for name, (med, worst) in (await _latency(args.spin)).items():
        print(f"  {name:45s} {med:8.2f} / {worst:8.1f}")
    print("\n3. time until 8 honest τ-retail episodes ended (x: over alone, same path)")
    await _side_by_side(args.terms, not args.no_serve)


if __name__ == "__main__":
    asyncio.run(main())
