"""envlab's side of ``bench/peers.py``: ``arith`` with ``--agent openai:stub@URL`` through
``envlab.rollout.rollout``, as ``envlab eval`` runs it. Prints one JSON line of results.

Runs whichever envlab ``import envlab`` finds (``PYTHONPATH=<checkout>/src`` for an older
commit): the contract-v2 API (``rollout(spec, factory, tasks, config=...)``, the factory closed
after the run) or the one before it (``rollout(env, agent, tasks, env_id=..., progress=False)``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any


async def run(url: str, n: int, concurrency: int, out: Path) -> dict[str, Any]:
    import envlab.core
    from envlab.agents import load_agent
    from envlab.envs import load_env
    from envlab.rollout import rollout

    spec = load_env("arith")
    tasks = spec.tasks(seed=0, n=n)
    agent = load_agent(f"openai:stub@{url}")
    v2 = hasattr(envlab.core, "AgentFactory")
    t0 = time.perf_counter()
    if v2:
        result = await rollout(spec, agent, tasks, out_dir=out, concurrency=concurrency)
        await agent.aclose()
    else:
        result = await rollout(
            spec, agent, tasks, out_dir=out, concurrency=concurrency, progress=False, env_id="arith"
        )
    seconds = time.perf_counter() - t0
    rewards = [r.reward for r in result.records]
    return {
        "n": len(result.records),
        "correct": sum(1 for r in rewards if r == 1.0),
        "errors": sum(1 for r in result.records if r.status != "ok"),
        "seconds": seconds,
        "api": "contract-v2" if v2 else "v1",
        "source": os.path.dirname(os.path.dirname(envlab.__file__)),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "stub")
    res = asyncio.run(run(a.base_url, a.samples, a.concurrency, Path(a.out)))
    print("RESULT " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
