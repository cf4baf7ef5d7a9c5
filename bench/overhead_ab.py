"""Engine overhead of two checkouts, paired: is this change cheaper or dearer per episode?

``bench/overhead.py`` measures envlab's added cost per episode (envlab's rollout minus a hand
loop, same environment and agent). On a shared 2-core machine one run of it varies by
+-15 us, more than the changes it should judge. This script keeps one worker process per
checkout alive and alternates them round by round (ABBA), each round timing its own hand loop
and rollout back to back, so that both see the same machine state; it prints the median of the
paired differences with its interquartile range.

    git worktree add /tmp/envlab-before <commit>
    python bench/overhead_ab.py --before /tmp/envlab-before --rounds 60
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checkout import load as checkout_of


async def _worker(checkout: Path, episodes: int) -> None:
    """Run one round per line on stdin; print ``[cpu_us, wall_us]`` added per episode."""
    from envlab.rollout import rollout

    overhead, env, agent = checkout_of(checkout)
    tasks = env.tasks(n=episodes // 4)
    with tempfile.TemporaryDirectory() as tmp:
        for r, _ in enumerate(sys.stdin):
            c0, w0 = time.process_time(), time.perf_counter()
            await overhead.hand_loop(env, tasks, 4, 32, Path(tmp) / f"hand{r}.jsonl")
            c1, w1 = time.process_time(), time.perf_counter()
            await rollout(
                env, agent, tasks, out_dir=Path(tmp) / f"run{r}", samples=4, concurrency=32
            )
            c2, w2 = time.process_time(), time.perf_counter()
            added = [((c2 - c1) - (c1 - c0)) / episodes * 1e6, ((w2 - w1) - (w1 - w0)) / episodes]
            print(json.dumps([added[0], added[1] * 1e6]), flush=True)


def _start(checkout: Path, episodes: int) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=f"{checkout / 'src'}{os.pathsep}{checkout}")
    cmd = [sys.executable, __file__, "--worker", str(checkout), "--episodes", str(episodes)]
    return subprocess.Popen(
        cmd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def _round(proc: subprocess.Popen[str]) -> list[float]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    if not line:
        raise SystemExit(f"a worker died (exit {proc.wait()}); run it alone to see why")
    return list(json.loads(line))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--before", type=Path, help="the checkout to compare with (a git worktree)")
    p.add_argument("--after", type=Path, default=Path(__file__).resolve().parents[1])
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--episodes", type=int, default=2000, help="episodes per round")
    p.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker is not None:
        asyncio.run(_worker(args.worker, args.episodes))
        return
    if args.before is None:
        p.error("--before CHECKOUT is required (e.g. git worktree add /tmp/before <commit>)")
    procs = {
        name: _start(path, args.episodes)
        for name, path in (("before", args.before), ("after", args.after))
    }
    results: dict[str, list[list[float]]] = {"before": [], "after": []}
    for r in range(args.rounds):
        for name in ("before", "after") if r % 2 == 0 else ("after", "before"):
            results[name].append(_round(procs[name]))
    for proc in procs.values():
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()
    print(f"arith, oracle agent, {args.episodes} episodes a round, {args.rounds} rounds (ABBA)")
    for i, clock in enumerate(("cpu", "wall")):
        before = [x[i] for x in results["before"]]
        after = [x[i] for x in results["after"]]
        diff = [a - b for a, b in zip(after, before, strict=True)]
        q1, _, q3 = statistics.quantiles(diff, n=4)
        print(
            f"{clock:>4}: added cost per episode, before {statistics.median(before):.1f} us, "
            f"after {statistics.median(after):.1f} us; paired after-before "
            f"{statistics.median(diff):+.1f} us (IQR {q1:+.1f} to {q3:+.1f})"
        )


if __name__ == "__main__":
    main()
