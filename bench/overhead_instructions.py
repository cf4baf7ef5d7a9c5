"""Engine overhead in instructions per episode, counted by valgrind (callgrind): repeatable
whatever else the machine does, unlike seconds.

For each checkout, the hand loop and envlab's rollout of ``bench/overhead.py`` each run ``n`` and
``3n`` episodes under callgrind; the difference divided by ``2n`` is the cost of one episode
(start-up and imports cancel out). envlab's added cost is rollout minus hand loop.

    git worktree add /tmp/envlab-before <commit>
    python bench/overhead_instructions.py --before /tmp/envlab-before --episodes 400
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checkout import load as checkout_of


async def _child(checkout: Path, mode: str, episodes: int) -> None:
    from envlab.rollout import rollout

    overhead, env, agent = checkout_of(checkout)
    with tempfile.TemporaryDirectory() as tmp:
        warm = env.tasks(n=5)  # lazy imports and caches before what is counted
        await overhead.hand_loop(env, warm, 4, 32, Path(tmp) / "warm.jsonl")
        await rollout(env, agent, warm, out_dir=Path(tmp) / "warm", samples=4, concurrency=32)
        tasks = env.tasks(n=episodes // 4)
        if mode == "hand":
            await overhead.hand_loop(env, tasks, 4, 32, Path(tmp) / "hand.jsonl")
        else:
            await rollout(env, agent, tasks, out_dir=Path(tmp) / "run", samples=4, concurrency=32)


def _instructions(checkout: Path, mode: str, episodes: int) -> int:
    env = dict(os.environ, PYTHONPATH=f"{checkout / 'src'}{os.pathsep}{checkout}")
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable]
    cmd += [__file__, "--child", str(checkout), mode, str(episodes)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stderr
    found = re.search(r"Collected : (\d+)", out)
    if found is None:
        raise SystemExit(f"callgrind printed no count:\n{out[-2000:]}")
    return int(found.group(1))


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        asyncio.run(_child(Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--before", type=Path, required=True, help="the checkout to compare with")
    p.add_argument("--after", type=Path, default=Path(__file__).resolve().parents[1])
    p.add_argument("--episodes", type=int, default=400)
    args = p.parse_args()
    n = args.episodes
    added: dict[str, int] = {}
    for name, checkout in (("before", args.before), ("after", args.after)):
        per = {}
        for mode in ("hand", "envlab"):
            count = _instructions(checkout, mode, 3 * n) - _instructions(checkout, mode, n)
            per[mode] = count // (2 * n)
        added[name] = per["envlab"] - per["hand"]
        print(
            f"{name:>6}: hand loop {per['hand']:,} instructions/episode, envlab "
            f"{per['envlab']:,}; envlab's added cost {added[name]:,}"
        )
    change = added["after"] - added["before"]
    print(
        f"added cost after - before: {change:+,} instructions/episode "
        f"({change / added['before']:+.0%})"
    )


if __name__ == "__main__":
    main()
