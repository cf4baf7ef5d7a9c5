"""τ domains: a fresh database per episode on SQLite vs a ``copy.deepcopy`` of the JSON data.

Side by side in one run, interleaved:

- reset: envlab's ``Database`` (a ``deserialize`` of the pristine SQLite image) vs
  ``copy.deepcopy`` of the same tables as Python dicts (what a JSON-backed environment does per
  episode), and envlab's whole ``env.reset`` (database, scripted user's opening);
- gold replay, episodes/s: envlab end to end (fresh database, every gold action through the
  tools, the changed records read back and compared with ``gold_diff``) vs the state work a
  JSON-backed τ-bench episode does to grade: two deep copies (the agent's and the gold replay's)
  and two hashes of the whole data (τ-bench compares data hashes). The JSON side's tool calls
  are not counted (they are dict lookups), which favours it.

    python bench/tau.py --domain retail --rounds 200
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import hashlib
import json
import statistics
import time
from typing import Any

from envlab.envs.tau.db import Database, load_json
from envlab.envs.tau.spec import TauAirline, TauRetail, TauSpec


def _quantiles(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return statistics.median(xs), xs[int(0.95 * (len(xs) - 1))]


def _json_episode(data: dict[str, Any]) -> None:
    for _ in range(2):  # the agent's copy and the gold replay's, each hashed whole
        state = copy.deepcopy(data)
        hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()


def _replay(spec: TauSpec, rows: list[dict[str, Any]]) -> None:
    episode = spec.environment
    for row in rows:
        tools = episode.__new__(episode)
        tools.db = Database(episode.domain, episode.schema)
        for action in row["actions"]:
            tools.call(action["name"], action["kwargs"])
        assert tools.db.changes() == row["gold_diff"]
        tools.db.close()


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--domain", choices=["retail", "airline"], default="retail")
    p.add_argument("--rounds", type=int, default=200)
    args = p.parse_args()
    spec: TauSpec = TauRetail() if args.domain == "retail" else TauAirline()
    schema = spec.environment.schema
    data = {t: load_json(args.domain, f"db/{t}.json") for t in schema.tables}
    Database(args.domain, schema).close()  # build the pristine image once, outside the timing
    tasks = spec.tasks()
    sqlite_s, deepcopy_s, reset_s = [], [], []
    for i in range(args.rounds):
        t0 = time.perf_counter()
        Database(args.domain, schema).close()
        t1 = time.perf_counter()
        copy.deepcopy(data)
        t2 = time.perf_counter()
        env = spec.new_episode()
        await env.reset(tasks[i % len(tasks)], 0)
        t3 = time.perf_counter()
        await env.close()
        sqlite_s.append(t1 - t0)
        deepcopy_s.append(t2 - t1)
        reset_s.append(t3 - t2)
    rows = load_json(args.domain, "tasks_test.json")
    t0 = time.perf_counter()
    _replay(spec, rows)
    envlab_eps = len(rows) / (time.perf_counter() - t0)
    n_json = max(5, len(rows) // 10)
    t0 = time.perf_counter()
    for _ in range(n_json):
        _json_episode(data)
    json_eps = n_json / (time.perf_counter() - t0)
    print(f"tau-{args.domain}: {len(rows)} test tasks, {args.rounds} resets, interleaved")
    for name, xs in (
        ("SQLite copy (envlab)", sqlite_s),
        ("copy.deepcopy of the JSON", deepcopy_s),
        ("envlab env.reset, whole", reset_s),
    ):
        p50, p95 = _quantiles(xs)
        print(f"  {name:<28} p50 {p50 * 1e3:8.3f} ms   p95 {p95 * 1e3:8.3f} ms")
    ratio = statistics.median(deepcopy_s) / statistics.median(sqlite_s)
    print(f"  deepcopy / SQLite copy (p50): {ratio:.0f}x")
    print(f"  gold replay: envlab {envlab_eps:.0f} episodes/s; JSON state work alone ")
    print(f"  (2 deep copies + 2 hashes per episode) {json_eps:.1f} episodes/s; ")
    print(f"  envlab / JSON: {envlab_eps / json_eps:.0f}x")


if __name__ == "__main__":
    asyncio.run(main())
