"""``envlab train``'s loop: async (rollouts and learning overlapped, ``max_staleness=1``) vs
``--sync`` (generate, then learn), side by side in one run, interleaved (sync, async, sync, ...),
in two labelled cases:

- ``latency``: every environment step waits ``--delay`` seconds that use no CPU (a remote model
  or tool answering). Overlap hides the wait behind learning: the case async is built for.
- ``cpu``: every episode's step does ``--work`` seconds of CPU in a worker thread (numpy matrix
  products, measured in the thread's CPU time: an in-process model generating, a local tool).
  On 2 cores the rollouts and the learner compete for the same cores, so overlap gains little,
  and can lose to the switching.

The decision model learns on ``triage``. By default the delay (and the work) are calibrated so
that generating a batch takes about as long as learning from it: a short sync warm-up measures
the learner's seconds per step and the rollout's seconds per batch without them. Prints each
mode's learner steps/s and episodes/s, their medians over the rounds, and the async/sync ratios.

    python bench/train.py --steps 30 --rounds 3
    python bench/train.py --cases cpu --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from envlab.core import Action, EnvSpec, StepResult
from envlab.core.wrappers import Awaiting, WrappedSpec, Wrapper
from envlab.envs.triage import TriageEnv
from envlab.train.decision_learner import DecisionConfig, DecisionLearner
from envlab.train.loop import TrainConfig, train


class StepDelay(Wrapper):
    """Every step waits ``delay`` seconds first (rollout latency)."""

    def __init__(self, env: Any, *, delay: float) -> None:
        super().__init__(env)
        self.delay = delay

    def step(self, action: Action) -> Awaiting[StepResult]:
        return self._delayed(action)

    async def _delayed(self, action: Action) -> StepResult:
        await asyncio.sleep(self.delay)
        return await self.env.step(action)


class StepWork(Wrapper):
    """Every step does ``work`` seconds of CPU (this thread's CPU time) in a worker thread."""

    def __init__(self, env: Any, *, work: float) -> None:
        super().__init__(env)
        self.work = work

    def step(self, action: Action) -> Awaiting[StepResult]:
        return self._worked(action)

    async def _worked(self, action: Action) -> StepResult:
        await asyncio.to_thread(_burn, self.work)
        return await self.env.step(action)


def _burn(seconds: float) -> None:
    import numpy as np

    a = np.ones((128, 128))
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        a = np.tanh(a @ a / 128.0)


def _run(spec: EnvSpec, cfg: TrainConfig, seed: int, model: dict[str, int]) -> dict[str, float]:
    tasks = spec.tasks(seed=seed, n=2000, split="train")
    learner = DecisionLearner.for_tasks(list(tasks), DecisionConfig(seed=seed, **model))
    with tempfile.TemporaryDirectory() as tmp:
        result = asyncio.run(train(spec, tasks, learner, out_dir=Path(tmp), config=cfg))
    m = result.metrics
    elapsed = m[-1].elapsed_s
    gen = [x for x in m[1:]]  # the first step includes the first batch's generation
    return {
        "elapsed_s": elapsed,
        "steps_per_s": len(m) / elapsed,
        "episodes_per_s": m[-1].episodes / elapsed,
        "learner_s": statistics.median(x.learner_s for x in gen or m),
        "last_reward": statistics.mean(x.reward_mean for x in m[-5:]),
    }


def _calibrate(args: argparse.Namespace) -> tuple[float, float, float]:
    """(learner s/step, rollout s/batch without delay, the delay that evens them)."""
    cfg = TrainConfig(steps=6, groups_per_step=args.groups, group_size=args.group_size,
                      sync=True, concurrency=args.concurrency)  # fmt: skip
    r = _run(WrappedSpec(TriageEnv(), StepDelay, delay=0.0), cfg, seed=99, model=_model(args))
    per_step = r["elapsed_s"] / cfg.steps
    rollout = max(per_step - r["learner_s"], 0.0)
    return r["learner_s"], rollout, max(r["learner_s"] - rollout, 0.0)


def _model(args: argparse.Namespace) -> dict[str, int]:
    return {"dim": args.dim, "hidden": args.hidden}


def _compare(args: argparse.Namespace, case: str, spec: EnvSpec) -> None:
    results: dict[str, list[dict[str, float]]] = {"sync": [], "async": []}
    for r in range(args.rounds):
        for mode in ("sync", "async"):
            cfg = TrainConfig(
                steps=args.steps, groups_per_step=args.groups, group_size=args.group_size,
                max_staleness=1, sync=mode == "sync", concurrency=args.concurrency,
            )  # fmt: skip
            out = _run(spec, cfg, seed=r, model=_model(args))
            results[mode].append(out)
            print(f"[{case}] round {r} {mode:5s}: {out['steps_per_s']:.2f} steps/s, "
                  f"{out['episodes_per_s']:.0f} episodes/s, learner {out['learner_s'] * 1e3:.1f} "
                  f"ms/step, reward (last 5 steps) {out['last_reward']:.3f}")  # fmt: skip
    med = {m: {k: statistics.median(x[k] for x in rs) for k in rs[0]} for m, rs in results.items()}
    print(f"\n[{case}] median of {args.rounds} rounds, {args.steps} steps of {args.groups} "
          f"groups x {args.group_size} samples:")  # fmt: skip
    print(f"{'':12s}{'steps/s':>10s}{'episodes/s':>12s}")
    for mode in ("sync", "async"):
        print(f"{mode:12s}{med[mode]['steps_per_s']:>10.2f}{med[mode]['episodes_per_s']:>12.0f}")
    ratio = med["async"]["steps_per_s"] / med["sync"]["steps_per_s"]
    eps = med["async"]["episodes_per_s"] / med["sync"]["episodes_per_s"]
    print(f"{'async/sync':12s}{ratio:>9.2f}x{eps:>11.2f}x   ({case})\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--groups", type=int, default=16, help="groups per learner step")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dim", type=int, default=1 << 16, help="the decision model's feature dim")
    ap.add_argument("--hidden", type=int, default=256, help="the decision model's hidden size")
    ap.add_argument("--delay", type=float, default=None, help="latency case: s per step")
    ap.add_argument("--work", type=float, default=None, help="cpu case: CPU s per step")
    ap.add_argument("--cases", default="latency,cpu", help="latency, cpu or both")
    args = ap.parse_args()
    learner_s, rollout_s, delay = _calibrate(args)
    episodes = args.groups * args.group_size
    work = args.work if args.work is not None else max(learner_s - rollout_s, 0.0) / episodes
    delay = args.delay if args.delay is not None else delay
    print(f"calibration: learner {learner_s * 1e3:.1f} ms/step, rollout without delay "
          f"{rollout_s * 1e3:.1f} ms/batch; latency case: {delay * 1e3:.1f} ms a step; cpu case: "
          f"{work * 1e3:.2f} ms of CPU a step ({episodes} a batch)\n")  # fmt: skip
    for case in args.cases.split(","):
        if case == "latency":
            _compare(args, case, WrappedSpec(TriageEnv(), StepDelay, delay=delay))
        elif case == "cpu":
            _compare(args, case, WrappedSpec(TriageEnv(), StepWork, work=work))
        else:
            raise SystemExit(f"--cases: unknown case {case!r}; use latency, cpu or both")


if __name__ == "__main__":
    main()
