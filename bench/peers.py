"""envlab against its peers on the same stub OpenAI-compatible server: samples per second.

The same 1000 ``arith`` problems (envlab's seed-0 task set), each answered by ONE real HTTP
call to one local stub server (``bench/peers/stub_server.py``, a separate process, answering
the right number at once), 32 samples in flight, graded by each framework's own scorer:

- ``envlab``: ``rollout(arith, openai:stub@URL)``, as ``envlab eval`` runs it (this checkout, or
  an older one given with ``--envlab NAME=SRC``);
- ``inspect_ai`` (pinned, below): ``eval(Task(samples, [system_message, generate()], match()))``;
- ``verifiers`` (pinned): ``SingleTurnEnv(...).evaluate(AsyncOpenAI(...), max_concurrent=32)``.

Each peer runs in its own virtualenv that this script creates from PyPI under
``$ENVLAB_BENCH_CACHE`` (default ``~/.cache/envlab-bench/peers/<name>``), never a test
dependency. Rounds are interleaved (the order rotates each round) so that a busy machine
slows every peer alike. Samples/s is samples over the seconds of the framework's eval call
(imports and start-up excluded); ratios are of medians.

    python bench/peers.py                         # 3 rounds, all peers
    python bench/peers.py --rounds 5 --envlab before=/tmp/envlab-before/src --envlab after=src
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent / "peers"
SRC = Path(__file__).resolve().parent.parent / "src"
SYSTEM = "Solve the problem. End with 'The answer is N.' where N is a number."


@dataclass(frozen=True)
class Peer:
    name: str
    requirements: tuple[str, ...]
    runner: str
    pythonpath: str | None = None

    def venv(self, cache: Path) -> Path:
        return cache / self.name


PEERS = {
    "inspect_ai": Peer("inspect_ai", ("inspect_ai==0.3.285", "openai"), "run_inspect.py"),
    "verifiers": Peer("verifiers", ("verifiers==0.3.1",), "run_verifiers.py"),
}


def cache_dir() -> Path:
    default = Path.home() / ".cache" / "envlab-bench" / "peers"
    return Path(os.environ.get("ENVLAB_BENCH_CACHE") or default)


def ensure_venv(peer: Peer, cache: Path) -> Path:
    """The peer's virtualenv (created and installed on first use); its python."""
    venv = peer.venv(cache)
    python = venv / "bin" / "python"
    marker = venv / "envlab-bench.json"
    want = {"requirements": list(peer.requirements)}
    if (
        marker.exists()
        and json.loads(marker.read_text()).get("requirements") == want["requirements"]
    ):
        return python
    print(f"[setup] creating {venv} with {' '.join(peer.requirements)} (once)", flush=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *peer.requirements], check=True)
    freeze = subprocess.run(
        [str(python), "-m", "pip", "freeze"], check=True, capture_output=True, text=True
    ).stdout
    want["freeze"] = freeze.splitlines()
    marker.write_text(json.dumps(want, indent=1))
    return python


def write_tasks(path: Path, n: int) -> None:
    """envlab's arith test split, seed 0: the one data set every peer runs."""
    sys.path.insert(0, str(SRC))
    from envlab.envs import load_env

    tasks = load_env("arith").tasks(seed=0, n=n)
    data = [{"id": t.id, "prompt": t.prompt, "answer": float(t.answer)} for t in tasks]
    path.write_text(json.dumps({"system": SYSTEM, "tasks": data}))


class StubServer:
    def __init__(self, tasks: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "stub_server.py"), "--tasks", str(tasks)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            self.proc.kill()
            raise SystemExit(f"stub server did not start: {line!r}")
        self.base_url = f"http://127.0.0.1:{int(line.split()[1])}/v1"

    def stats(self) -> dict[str, int]:
        with urllib.request.urlopen(self.base_url.removesuffix("/v1") + "/stats") as r:
            return json.loads(r.read())

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def run_one(
    label: str,
    python: str,
    runner: Path,
    env: dict[str, str],
    server: StubServer,
    a: argparse.Namespace,
    work: Path,
) -> dict[str, object]:
    out = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=work))
    before = server.stats()
    cmd = [
        python,
        str(runner),
        "--base-url",
        server.base_url,
        "--samples",
        str(a.samples),
        "--concurrency",
        str(a.concurrency),
        "--out",
        str(out),
        "--tasks",
        str(work / "tasks.json"),
    ]
    if runner.name == "run_envlab.py":
        cmd = cmd[:-2]  # envlab makes its own arith tasks (the same ones)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.timeout)
    wall = time.perf_counter() - t0
    after = server.stats()
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout)[-3000:]
        raise SystemExit(f"{label} failed (exit {proc.returncode}):\n{tail}")
    res: dict[str, object] = json.loads(lines[-1].removeprefix("RESULT "))
    res["process_s"] = wall
    res["rate"] = float(res["n"]) / float(res["seconds"])  # type: ignore[arg-type]
    for key in ("requests", "misses", "connections"):
        res[f"server_{key}"] = after[key] - before[key]
    return res


def describe(res: dict[str, object]) -> str:
    return (
        f"{res['rate']:8.1f} samples/s  ({res['n']} in {float(res['seconds']):.2f}s, "  # type: ignore[arg-type]
        f"correct {res['correct']}; server: {res['server_requests']} requests, "
        f"{res['server_misses']} unknown prompts, {res['server_connections']} connections; "
        f"process {float(res['process_s']):.1f}s)"  # type: ignore[arg-type]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--peers", default="inspect_ai,verifiers", help="comma list; '' for none")
    ap.add_argument(
        "--envlab",
        action="append",
        metavar="NAME=SRC",
        help="an envlab side: its name and source folder (default: envlab=<this checkout>/src)",
    )
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--json", type=Path, help="write all results here")
    a = ap.parse_args()

    cache = cache_dir()
    sides: dict[str, tuple[str, Path, dict[str, str]]] = {}
    for spec in a.envlab or [f"envlab={SRC}"]:
        name, _, src = spec.partition("=")
        env = dict(os.environ, PYTHONPATH=str(Path(src).resolve()), OPENAI_API_KEY="stub")
        sides[name] = (sys.executable, HERE / "run_envlab.py", env)
    for name in [p for p in a.peers.split(",") if p]:
        peer = PEERS[name]
        python = ensure_venv(peer, cache)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update(OPENAI_API_KEY="stub", INSPECT_DISPLAY="none", TOKENIZERS_PARALLELISM="false")
        sides[name] = (str(python), HERE / peer.runner, env)

    with tempfile.TemporaryDirectory(prefix="envlab-peers-") as tmp:
        work = Path(tmp)
        write_tasks(work / "tasks.json", a.samples)
        server = StubServer(work / "tasks.json")
        results: dict[str, list[dict[str, object]]] = {k: [] for k in sides}
        names = list(sides)
        try:
            for rnd in range(a.rounds):
                order = names[rnd % len(names) :] + names[: rnd % len(names)]
                for name in order:
                    python, runner, env = sides[name]
                    res = run_one(name, python, runner, env, server, a, work)
                    results[name].append(res)
                    print(f"round {rnd + 1} {name:<12} {describe(res)}", flush=True)
        finally:
            server.close()
    report(results, a)


def report(results: dict[str, list[dict[str, object]]], a: argparse.Namespace) -> None:
    med = {k: statistics.median(float(r["rate"]) for r in v) for k, v in results.items()}
    print(
        f"\nmedian samples/s ({a.samples} samples, concurrency {a.concurrency}, {a.rounds} rounds):"
    )
    for k, v in med.items():
        print(f"  {k:<12} {v:8.1f}")
    envlabs = [k for k in med if k not in PEERS]
    for e in envlabs:
        for p in PEERS:
            if p in med:
                print(f"  {e}/{p}: {med[e] / med[p]:.2f}x")
    if a.json:
        a.json.write_text(json.dumps({"median": med, "rounds": results}, indent=1))


if __name__ == "__main__":
    main()
