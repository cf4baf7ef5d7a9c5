"""Engine overhead: envlab's rollout engine vs a minimal hand-written asyncio loop.

Both run the same environment (``arith``) with the same scripted agent (``oracle``) for N episodes
at the same concurrency, and both write one JSON line per episode to a file, flushed per line.
The hand loop records what a careful person would log by hand (ids, messages, reward); envlab
records full trajectories (messages, steps, timings, agent spec), with timeouts, error attribution
and retries. Prints episodes/s and steps/s of each, the ratio of their wall times, and envlab's
added cost per episode in microseconds, of wall time and of CPU time (``time.process_time``, the
headline: on a shared machine it moves less with what else runs; the target is 40 us). The
repeats interleave the two runners, so both see the same machine state; each figure is the best
of the repeats. ``--latency-ms`` adds a sleep to every step of the
environment (as a sandbox command or an HTTP tool would), to compare the fixed cost with real
step times.

    python bench/overhead.py --episodes 10000 --concurrency 32
    python bench/overhead.py --episodes 4000 --concurrency 64 --latency-ms 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

from envlab.agents.scripted import OracleAgent
from envlab.core import Action, AgentClass, EnvSpec, EpisodeContext, StepResult
from envlab.envs.arith import ArithConfig, ArithEnv, ArithEpisode
from envlab.rollout import rollout

CPU_TARGET_US = 40.0
"""The engine's budget of CPU per episode over the hand loop, in microseconds."""


class LatentArithEpisode(ArithEpisode):
    async def step(self, action: Action) -> StepResult:
        assert isinstance(self.spec, LatentArith)
        await asyncio.sleep(self.spec.config.latency_ms / 1000)
        return await super().step(action)


class LatentConfig(ArithConfig):
    latency_ms: float = 0.0


class LatentArith(ArithEnv):
    """``arith`` whose every step also waits ``latency_ms`` (I/O such as a sandbox call)."""

    Config = LatentConfig
    environment = LatentArithEpisode
    config: LatentConfig


async def hand_loop(spec: EnvSpec, tasks, samples: int, concurrency: int, out: Path) -> int:  # type: ignore[no-untyped-def]
    steps = 0
    work = iter([(t, s) for t in tasks for s in range(samples)])
    with out.open("w") as fh:

        async def worker() -> None:
            nonlocal steps
            for task, s in work:
                env, agent = spec.new_episode(), OracleAgent()
                obs = await env.reset(task, s)
                await agent.start(
                    EpisodeContext(
                        task_id=task.id,
                        prompt=obs.text,
                        tools=env.tools,
                        seed=s,
                        task=task,
                        oracle_actions=env.oracle_actions(task),
                    )
                )
                messages = [{"role": "user", "content": obs.text}]
                reward = 0.0
                while True:
                    action = await agent.act(obs)
                    res = await env.step(action)
                    steps += 1
                    messages.append(action.to_message())
                    reward += res.reward
                    if res.done or res.truncated:
                        break
                graded = await env.grade()
                reward = graded.total if graded is not None else reward
                await env.close()
                line = {"task_id": task.id, "sample": s, "messages": messages, "reward": reward}
                fh.write(json.dumps(line) + "\n")
                fh.flush()

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return steps


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--episodes", type=int, default=10_000)
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--latency-ms", type=float, default=0.0)
    args = p.parse_args()
    env = LatentArith(latency_ms=args.latency_ms) if args.latency_ms else ArithEnv()
    tasks = env.tasks(n=args.episodes // args.samples)
    n = len(tasks) * args.samples
    best_hand = best_envlab = cpu_hand = cpu_envlab = float("inf")
    steps_hand = steps_envlab = 0
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):  # interleaved, so both see the same machine state
            t0, c0 = time.perf_counter(), time.process_time()
            steps_hand = await hand_loop(
                env, tasks, args.samples, args.concurrency, Path(tmp) / f"hand{r}.jsonl"
            )
            best_hand = min(best_hand, time.perf_counter() - t0)
            cpu_hand = min(cpu_hand, time.process_time() - c0)
            t0, c0 = time.perf_counter(), time.process_time()
            res = await rollout(
                env,
                AgentClass(OracleAgent),
                tasks,
                out_dir=Path(tmp) / f"envlab{r}",
                samples=args.samples,
                concurrency=args.concurrency,
                command=["bench/overhead.py"],
            )
            best_envlab = min(best_envlab, time.perf_counter() - t0)
            cpu_envlab = min(cpu_envlab, time.process_time() - c0)
            steps_envlab = sum(r.n_steps for r in res.records)
            assert all(r.reward == 1.0 for r in res.records)
    print(
        f"arith (+{args.latency_ms} ms per step), oracle agent, {n} episodes, "
        f"concurrency {args.concurrency}, best of {args.repeats}"
    )
    print(f"{'runner':<10}{'wall s':>9}{'cpu s':>8}{'episodes/s':>13}{'steps/s':>11}")
    for name, wall, cpu, steps in (
        ("hand loop", best_hand, cpu_hand, steps_hand),
        ("envlab", best_envlab, cpu_envlab, steps_envlab),
    ):
        print(f"{name:<10}{wall:>9.3f}{cpu:>8.3f}{n / wall:>13.0f}{steps / wall:>11.0f}")
    print(f"ratio envlab/hand-loop (wall time): {best_envlab / best_hand:.2f}")
    print(f"envlab's added cost per episode: {(best_envlab - best_hand) / n * 1e6:.1f} us")
    added_cpu = (cpu_envlab - cpu_hand) / n * 1e6
    verdict = "met" if added_cpu <= CPU_TARGET_US else "not met"
    print(
        f"envlab's added CPU per episode: {added_cpu:.1f} us "
        f"(target <= {CPU_TARGET_US:.0f} us: {verdict})"
    )


if __name__ == "__main__":
    asyncio.run(main())
