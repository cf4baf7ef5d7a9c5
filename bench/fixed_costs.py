"""envlab's fixed costs, each as a ratio against its floor, measured side by side in one run.

    python bench/fixed_costs.py                              # all five sections
    python bench/fixed_costs.py --sections sandbox,help --rounds 100

Each section interleaves envlab and its floor (one of each per round), so a load change on the
machine hits both alike, and prints medians, the ratio, and the target beside it:

- ``sandbox`` (target: envlab <= 1.3x the floor): ``BubblewrapSandbox.create()`` +
  ``exec(["true"])`` + ``close()`` against a bare bwrap with the same isolation: the command
  line envlab runs (namespaces, mounts, uid drop, the seccomp program on a pipe) started by
  ``subprocess.run`` with the same rlimits set before ``exec`` (``preexec_fn``), in a workspace
  made once: no lease, no workspace per sandbox, no status channel, no start gate;
- ``engine`` (target: <= 40 us of CPU per episode over the floor): ``rollout`` of ``arith``
  with the oracle agent against ``bench/overhead.py``'s hand-written asyncio loop (it also
  grades and writes one JSON line per episode), CPU seconds of this process (``process_time``);
- ``eval`` (target: envlab's process >= 0.8x as fast as the floor): start to exit of an
  ``envlab eval arith --agent openai:stub@URL --tasks N --concurrency 32`` process against a
  plain aiohttp script (``bench/fixed_costs/aiohttp_eval.py``) asking the same N problems of the
  same stub server (``bench/peers/stub_server.py``, a process of its own);
- ``help`` (target: < 0.3 s): ``envlab --help`` against ``python -c pass`` (the interpreter's
  own start-up, the floor of any Python command);
- ``image`` (target: < 20 s): ``envlab vet --agent none`` of one task folder in its image
  (``ENVLAB_IMAGES=auto``; its base and image built once before timing) against the same vet
  on the host's filesystem (``ENVLAB_IMAGES=off``): every probe, oracle run and re-grade, all
  of envlab's own work. The trainability check's agent samples (``--agent smollm2``, the
  default) add the model's generation time, which is the model's, not a fixed cost: 4 samples
  of SmolLM2 on hello-file took 80 s of a 136 s vet on a busy machine, the probes 10 s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
SECTIONS = ("sandbox", "engine", "eval", "help", "image")
ENVLAB = [sys.executable, "-m", "envlab.cli.main"]


class Row:
    def __init__(self, figure: str, envlab: float, floor: float, unit: str) -> None:
        self.figure, self.envlab, self.floor, self.unit = figure, envlab, floor, unit
        self.value = 0.0
        self.target = ""
        self.ok = False

    def line(self) -> str:
        mark = "ok" if self.ok else "MISSED"
        return (
            f"{self.figure:<34}{self.envlab:>11.4g} {self.unit:<4}"
            f"{self.floor:>11.4g} {self.unit:<4}"
            f"{self.value:>9.3g}   {self.target:<14}{mark}"
        )


def interleave(
    rounds: int, a: Callable[[], object], b: Callable[[], object]
) -> tuple[float, float]:
    """Median seconds of ``a`` and of ``b``, one of each per round, alternating which first."""
    ta: list[float] = []
    tb: list[float] = []
    for i in range(rounds):
        for fn, out in ((a, ta), (b, tb)) if i % 2 == 0 else ((b, tb), (a, ta)):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return statistics.median(ta), statistics.median(tb)


# --- sandbox -------------------------------------------------------------------------------------
def sandbox_section(rounds: int) -> Row:
    from envlab.sandbox import BubblewrapSandbox
    from envlab.sandbox.gate import seccomp_fd
    from sandbox import same_argv

    async def envlab_once() -> None:
        box = await BubblewrapSandbox.create()
        try:
            assert (await box.exec(["true"])).exit_code == 0
        finally:
            await box.close()

    loop = asyncio.new_event_loop()
    held = loop.run_until_complete(BubblewrapSandbox.create())
    limits = [(k, v) for k, v in held._gate(-1).limits if v is not None]

    def set_limits() -> None:
        for kind, value in limits:
            resource.setrlimit(kind, (value, value))

    def floor_once() -> None:
        fd = seccomp_fd()
        try:
            argv = same_argv(held, fd)
            subprocess.run(argv, check=True, pass_fds=[fd], preexec_fn=set_limits)
        finally:
            os.close(fd)

    try:
        for _ in range(5):  # warm up: staged /etc, page cache
            loop.run_until_complete(envlab_once())
            floor_once()
        env_s, floor_s = interleave(
            rounds, lambda: loop.run_until_complete(envlab_once()), floor_once
        )
    finally:
        loop.run_until_complete(held.close())
        loop.close()
    row = Row("sandbox create+exec+close", env_s * 1e3, floor_s * 1e3, "ms")
    row.value, row.target = env_s / floor_s, "<= 1.3x"
    row.ok = row.value <= 1.3
    return row


# --- engine --------------------------------------------------------------------------------------
def engine_section(episodes: int, repeats: int) -> Row:
    from envlab.agents.scripted import OracleAgent
    from envlab.core import AgentClass
    from envlab.envs.arith import ArithEnv
    from envlab.rollout import rollout
    from overhead import hand_loop

    env = ArithEnv()
    tasks = env.tasks(n=episodes // 4)
    n = len(tasks) * 4
    cpu: dict[str, list[float]] = {"envlab": [], "floor": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeats + 1):  # the first pair warms up and is not counted
            for name in ("floor", "envlab") if r % 2 else ("envlab", "floor"):
                out = Path(tmp) / f"{name}{r}"
                t0 = time.process_time()
                if name == "floor":
                    asyncio.run(hand_loop(env, tasks, 4, 32, out.with_suffix(".jsonl")))
                else:
                    asyncio.run(
                        rollout(
                            env,
                            AgentClass(OracleAgent),
                            tasks,
                            out_dir=out,
                            samples=4,
                            concurrency=32,
                            command=["bench/fixed_costs.py"],
                        )
                    )
                if r:
                    cpu[name].append(time.process_time() - t0)
    env_us = min(cpu["envlab"]) / n * 1e6
    floor_us = min(cpu["floor"]) / n * 1e6
    row = Row("engine CPU per episode", env_us, floor_us, "us")
    row.value, row.target = env_us - floor_us, "<= 40 us over"
    row.ok = row.value <= 40
    return row


# --- eval ----------------------------------------------------------------------------------------
def eval_section(rounds: int, samples: int) -> Row:
    from peers import StubServer, write_tasks

    with tempfile.TemporaryDirectory(prefix="envlab-fixed-") as tmp:
        work = Path(tmp)
        write_tasks(work / "tasks.json", samples)
        server = StubServer(work / "tasks.json")
        env = dict(os.environ, OPENAI_API_KEY="stub")
        count = iter(range(10**6))

        def envlab_run() -> None:
            out = work / f"envlab-{next(count)}"
            cmd = [*ENVLAB, "eval", "arith", "--agent", f"openai:stub@{server.base_url}",
                   "--tasks", str(samples), "--concurrency", "32", "--out", str(out),
                   "--no-progress", "--json"]  # fmt: skip
            subprocess.run(cmd, check=True, env=env, capture_output=True)

        def floor_run() -> None:
            cmd = [sys.executable, str(HERE / "fixed_costs" / "aiohttp_eval.py"),
                   "--base-url", server.base_url, "--tasks", str(work / "tasks.json"),
                   "--out", str(work / f"floor-{next(count)}.jsonl")]  # fmt: skip
            subprocess.run(cmd, check=True, env=env, capture_output=True)

        try:
            env_s, floor_s = interleave(rounds, envlab_run, floor_run)
        finally:
            server.close()
    row = Row(f"eval process, {samples} samples", env_s, floor_s, "s")
    row.value, row.target = floor_s / env_s, ">= 0.8x"
    row.ok = row.value >= 0.8
    return row


# --- help ----------------------------------------------------------------------------------------
def help_section(rounds: int) -> Row:
    def run(cmd: list[str]) -> Callable[[], object]:
        return lambda: subprocess.run(cmd, check=True, capture_output=True)

    env_s, floor_s = interleave(
        rounds, run([*ENVLAB, "--help"]), run([sys.executable, "-c", "pass"])
    )
    row = Row("envlab --help", env_s, floor_s, "s")
    row.value, row.target = env_s, "< 0.3 s"
    row.ok = env_s < 0.3
    return row


# --- image ---------------------------------------------------------------------------------------
def image_section(rounds: int, task: Path) -> Row:
    if os.geteuid() != 0 or shutil.which("mmdebstrap") is None:
        raise SystemExit("the image section needs root and mmdebstrap (apt-get install mmdebstrap)")

    def vet(mode: str) -> Callable[[], object]:
        def once() -> None:
            with tempfile.TemporaryDirectory() as out:
                cmd = [*ENVLAB, "vet", str(task), "--agent", "none", "--out", out]
                env = dict(os.environ, ENVLAB_IMAGES=mode)
                subprocess.run(cmd, check=True, env=env, capture_output=True)

        return once

    print(f"[image] building {task.name}'s base and image once (cached after)", flush=True)
    vet("auto")()
    env_s, floor_s = interleave(rounds, vet("auto"), vet("off"))
    row = Row(f"vet {task.name} in its image", env_s, floor_s, "s")  # floor: on the host
    row.value, row.target = env_s, "< 20 s"
    row.ok = env_s < 20
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--rounds", type=int, default=60, help="sandbox rounds")
    ap.add_argument("--episodes", type=int, default=4000, help="engine episodes per repeat")
    ap.add_argument("--repeats", type=int, default=3, help="engine repeats (best counted)")
    ap.add_argument("--eval-samples", type=int, default=1000)
    ap.add_argument("--process-rounds", type=int, default=5, help="eval/help/image rounds")
    ap.add_argument("--task", type=Path, default=HERE.parent / "examples/tasks/hello-file")
    a = ap.parse_args()
    wanted = [s for s in a.sections.split(",") if s]
    unknown = set(wanted) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    rows: list[Row] = []
    run = {
        "sandbox": lambda: sandbox_section(a.rounds),
        "engine": lambda: engine_section(a.episodes, a.repeats),
        "eval": lambda: eval_section(a.process_rounds, a.eval_samples),
        "help": lambda: help_section(max(a.process_rounds, 10)),
        "image": lambda: image_section(min(a.process_rounds, 3), a.task),
    }
    for name in wanted:
        print(f"[{name}] measuring...", flush=True)
        rows.append(run[name]())
        print(rows[-1].line(), flush=True)
    print(f"\nfixed costs on {os.cpu_count()} cores, envlab against its floor, side by side:")
    print(f"{'figure':<34}{'envlab':>16}{'floor':>16}{'value':>9}   {'target':<14}")
    for row in rows:
        print(row.line())


if __name__ == "__main__":
    main()
