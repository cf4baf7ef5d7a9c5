"""What ``--backend ray`` costs against ``--backend local``, measured side by side in one run.

    python bench/on_ray.py                      # a local Ray of 2 CPUs; ~2 min on 2 cores
    python bench/on_ray.py --episodes 400 --rounds 3

- ``start-up``: ``ray.init(num_cpus=N)``, the first actor's first call (a worker process
  started, envlab imported there, the spec unpickled and its content hash recomputed), and
  ``ray.shutdown()``: what a command without ``--address`` pays once (``backend_session``);
- ``per episode``: ``rollout`` of ``arith`` with the oracle (a short Python episode: the cost
  is all machinery) and of the ``hello-file`` task folder in a bubblewrap sandbox (a real
  episode: a sandbox per episode, the verifier), each on both backends in the same connected
  Ray, interleaved round by round; wall seconds per episode and the ratio ray/local;
- ``vet``: ``vet_environment`` of ``arith`` (agent none) on both backends, wall seconds.

Local runs the episodes as asyncio tasks of this process; Ray runs them on ``concurrency``
actors of this machine, so on one machine Ray can only add cost (pickling, the object store, a
round trip per episode): the figures are its overhead, which a cluster pays back by adding
machines.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def start_up(num_cpus: int) -> dict[str, float]:
    import ray

    from envlab.agents import load_agent
    from envlab.envs import load_env
    from envlab.rollout.driver import PlannedEpisode, episode_ids
    from envlab.rollout.ray_backend import RayPool

    t0 = time.perf_counter()
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    t1 = time.perf_counter()
    spec, agent = load_env("arith"), load_agent("oracle")
    task = spec.tasks(n=1)[0]
    planned = PlannedEpisode(
        task, 0, episode_ids(spec.name, spec.seed_hash(), task.id, 0, 0), agent
    )

    async def first() -> None:
        async with RayPool(spec, concurrency=1) as pool:
            await pool.run(planned)

    asyncio.run(first())
    t2 = time.perf_counter()
    ray.shutdown()
    t3 = time.perf_counter()
    return {"init": t1 - t0, "first episode": t2 - t1, "shutdown": t3 - t2}


async def _rollout(env: str, n: int, backend: str, concurrency: int, **env_args: object) -> float:
    from envlab.agents import load_agent
    from envlab.envs import load_env
    from envlab.rollout import rollout

    spec, agent = load_env(env, **env_args), load_agent("oracle")
    tasks = spec.tasks()
    samples = max(1, n // len(tasks))
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        r = await rollout(spec, agent, tasks.head(n), out_dir=Path(d) / "run", samples=samples,
                          concurrency=concurrency, backend=backend)  # fmt: skip
        took = time.perf_counter() - t0
    assert all(rec.reward == 1.0 for rec in r.records), "the oracle must score 1 everywhere"
    return took / len(r.records)


async def _vet(backend: str, concurrency: int) -> float:
    from envlab.envs import load_env
    from envlab.vet.runner import VetConfig, vet_environment

    cfg = VetConfig(tasks=4, oracle_runs=2, samples=2, concurrency=concurrency, backend=backend)
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        await vet_environment(load_env("arith"), out_dir=Path(d) / "vet", config=cfg)
        return time.perf_counter() - t0


def side_by_side(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    import ray

    ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False)
    folder = str(ROOT / "examples" / "tasks" / "hello-file")
    cases = {
        "arith, per episode (s)": lambda b: _rollout("arith", args.episodes, b, args.num_cpus),
        "hello-file in bwrap, per episode (s)": lambda b: _rollout(
            folder, args.folder_episodes, b, args.num_cpus, sandbox="bwrap", images="off"
        ),
        "vet arith (s)": lambda b: _vet(b, args.num_cpus),
    }
    got: dict[str, dict[str, list[float]]] = {c: {"local": [], "ray": []} for c in cases}
    try:
        for _ in range(args.rounds):
            for case, run in cases.items():
                for backend in ("local", "ray"):
                    got[case][backend].append(asyncio.run(run(backend)))
    finally:
        ray.shutdown()
    return {c: {b: statistics.median(v) for b, v in by.items()} for c, by in got.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--num-cpus", type=int, default=2)
    p.add_argument("--episodes", type=int, default=200, help="arith episodes per run")
    p.add_argument("--folder-episodes", type=int, default=8, help="hello-file episodes per run")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    s = start_up(args.num_cpus)
    print(f"Ray start-up (num_cpus={args.num_cpus}): init {s['init']:.2f} s, first episode on "
          f"a fresh actor {s['first episode']:.2f} s, shutdown {s['shutdown']:.2f} s")  # fmt: skip
    rows = side_by_side(args)
    print(f"{'case (median of ' + str(args.rounds) + ' rounds)':<40} {'local':>10} {'ray':>10}"
          f" {'ray/local':>10}")  # fmt: skip
    for case, by in rows.items():
        local, ray_ = by["local"], by["ray"]
        print(f"{case:<40} {local:>10.4f} {ray_:>10.4f} {ray_ / local:>9.2f}x")


if __name__ == "__main__":
    main()
