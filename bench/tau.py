"""τ domains: envlab (SQLite per episode) against τ-bench's own code, side by side.

τ-bench is not a dependency of envlab and none of its code is in this repository: give a checkout
you cloned (``git clone https://github.com/sierra-research/tau-bench DIR``) as ``--tau-bench DIR``
or ``$TAU_BENCH_DIR``. The script makes its own virtualenv under
``${ENVLAB_BENCH_CACHE:-~/.cache/envlab-bench}/tau-bench`` (once per version of the checkout):
``pip install --no-deps DIR``, then only what importing its envs needs, ``pydantic`` and
``litellm`` (``tau_bench/envs/user.py`` imports ``litellm.completion`` at the top; the other
requirements, openai, anthropic, mistralai, google-generativeai, numpy, tenacity, termcolor,
serve its agents only). τ-bench's side runs in that venv's python (``bench/tau/tau_bench_side.py``,
JSON lines over a pipe, ``LITELLM_LOCAL_MODEL_COST_MAP=True`` so importing litellm fetches
nothing); ``tau_bench`` is never imported here.

Each side times its own operations (``perf_counter``), so the pipe is in no figure. Rounds are
interleaved (which side goes first alternates), on the same tasks of the same domain's test split:

- fresh database: envlab's ``Database`` (a ``deserialize`` of the pristine SQLite image) vs
  τ-bench's ``data_load_func`` (``json.load`` of the domain's files), what each does per episode;
- episode start: ``spec.new_episode()`` + ``env.reset(task)`` (scripted user) vs what τ-bench's
  ``run.py`` does per episode, ``get_env(domain, ..., task_index=i)`` then ``env.reset(i)`` (two
  data loads). τ-bench's users all call a model except ``human``, whose constructor makes no call
  and whose ``reset`` reads stdin: the env is made with ``human`` and its user replaced before
  ``reset`` by one that answers at once (the instruction; "ok"; ``###STOP###`` to the last
  message), the honest "no LLM" path: nothing of ``Env`` is skipped;
- gold episode: the same actions on both sides, envlab's ``oracle_actions(task)`` (the identity
  lookup, every gold tool call, the confirmations, the required outputs said): envlab steps them
  and ``grade()``s (τ-bench's reward, ``reward=tau``); τ-bench ``Env.step``s them (tools on its
  dicts) until done, where ``step`` runs ``calculate_reward`` (a fresh data load, the gold actions
  replayed on it, both data hashed whole, outputs looked for). Both include making the episode.
  τ-bench's stand-in user answers without reading; envlab's scripted user reads every message
  (identity questions, confirmations): that favours τ-bench.

The floor line gives a no-op step on each side (an unknown tool: the cheapest step there is) and
the pipe round trip to τ-bench's process (outside the figures, it bounds nothing here).
Ratios are envlab over τ-bench of the medians: below 1 envlab takes less time. A first, untimed
round of one episode per row warms both sides.

    git clone https://github.com/sierra-research/tau-bench /tmp/tau-bench
    python bench/tau.py --tau-bench /tmp/tau-bench --domain retail --rounds 3 --tasks 8

Measured so (2-core machine, shared with a running test suite; τ-bench 59a200c, litellm 1.110.2):

    $ python bench/tau.py --tau-bench /tmp/tau-bench --domain retail --rounds 3 --tasks 8
    tau-retail, test split: 3 interleaved rounds, 24 episodes a row
                               envlab p50  τ-bench p50  envlab/τ-bench
      fresh database             0.203 ms    28.406 ms         0.0071x
      episode start              0.524 ms    62.376 ms         0.0084x
      gold episode               9.444 ms   604.651 ms         0.0156x
      gold episodes/s                99.4         1.70           58.7x
      reward 1.0: envlab 24/24, τ-bench 24/24 of the same episodes
      floor: a no-op step (unknown tool) envlab 20.7 µs, τ-bench 6.7 µs
             pipe round trip to τ-bench's process 79 µs (in no figure)

    $ python bench/tau.py --tau-bench /tmp/tau-bench --domain airline --rounds 3 --tasks 5
    tau-airline, test split: 3 interleaved rounds, 15 episodes a row
                               envlab p50  τ-bench p50  envlab/τ-bench
      fresh database             0.973 ms   131.811 ms         0.0074x
      episode start              1.303 ms   273.970 ms         0.0048x
      gold episode              15.983 ms  2575.531 ms         0.0062x
      gold episodes/s                67.1         0.40          168.2x
      reward 1.0: envlab 15/15, τ-bench 15/15 of the same episodes
      floor: a no-op step (unknown tool) envlab 21.3 µs, τ-bench 6.7 µs
             pipe round trip to τ-bench's process 95 µs (in no figure)

The load moved figures between runs minutes apart (airline's τ-bench gold episode: 1.36 s in
one, 2.58 s in this one; envlab's 11 and 16 ms; the ratio 122x and 168x). τ-bench's
episode is three loads of its JSON data (``get_env``, ``reset``, ``calculate_reward``) and two
hashes of all of it; envlab's is a memory copy of an SQLite image and a diff of what was written.
τ-bench's no-op step is cheaper than envlab's (an unknown name answered at once, vs envlab's
tool-call path with its log and events): the gap is in the state work, not the step.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from envlab.core import Action, Environment, Task
from envlab.envs.tau.db import Database
from envlab.envs.tau.spec import TauAirline, TauRetail, TauSpec

SIDE = Path(__file__).resolve().parent / "tau" / "tau_bench_side.py"
IMPORT_DEPS = ("pydantic", "litellm")
GET_ONE = "git clone https://github.com/sierra-research/tau-bench DIR"


def checkout(arg: str | None) -> Path:
    """The τ-bench checkout given, or exit 2 saying how to get one."""
    given = arg or os.environ.get("TAU_BENCH_DIR")
    if not given:
        fail(f"bench/tau.py needs a τ-bench checkout: {GET_ONE}, then --tau-bench DIR")
    path = Path(given).expanduser().resolve()
    if not (path / "tau_bench" / "envs" / "base.py").is_file():
        fail(f"{path} is not a τ-bench checkout (no tau_bench/envs/base.py): {GET_ONE}")
    return path


def fail(message: str) -> NoReturn:
    print(message, file=sys.stderr)
    sys.exit(2)


def fingerprint(src: Path) -> str:
    """What identifies the checkout's content: every file's path, size and mtime."""
    h = hashlib.sha256()
    files = [src / "setup.py", *sorted((src / "tau_bench").rglob("*"))]
    for f in (f for f in files if f.is_file()):
        st = f.stat()
        h.update(f"{f.relative_to(src)} {st.st_size} {st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def ensure_venv(src: Path) -> Path:
    """The bench's τ-bench virtualenv, (re)installed when the checkout changed; its python."""
    cache = Path(os.environ.get("ENVLAB_BENCH_CACHE") or Path.home() / ".cache/envlab-bench")
    venv = cache / "tau-bench"
    python, marker = venv / "bin" / "python", venv / "envlab-bench.json"
    want = {"checkout": str(src), "fingerprint": fingerprint(src), "deps": list(IMPORT_DEPS)}
    if marker.is_file() and json.loads(marker.read_text()).get("want") == want:
        return python
    print(
        f"[setup] installing {src} into {venv} (once per checkout; pip will say the agents'"
        " requirements are missing: not needed here)",
        file=sys.stderr,
    )
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "--no-deps", "--force-reinstall", str(src)], check=True)
    subprocess.run([*pip, *IMPORT_DEPS], check=True)
    freeze = subprocess.run(
        [str(python), "-m", "pip", "freeze"], check=True, capture_output=True, text=True
    ).stdout
    marker.write_text(json.dumps({"want": want, "freeze": freeze.splitlines()}, indent=1))
    return python


class TauBench:
    """τ-bench's side: a process of the bench venv's python answering JSON requests."""

    def __init__(self, python: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
        self.proc = subprocess.Popen(
            [str(python), str(SIDE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=python.parent,
        )

    def ask(self, **req: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"τ-bench's side ended (exit {self.proc.wait()}); see its stderr")
        return json.loads(line)  # type: ignore[no-any-return]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)


# --- envlab's side ------------------------------------------------------------------------------
def as_tau(actions: list[Action]) -> list[dict[str, Any]]:
    """envlab's actions as τ-bench's: text is a ``respond``, each tool call an action."""
    out: list[dict[str, Any]] = []
    for a in actions:
        if a.text:
            out.append({"name": "respond", "kwargs": {"content": a.text}})
        out += [{"name": c.name, "kwargs": c.arguments} for c in a.tool_calls]
    return out


async def episode(spec: TauSpec, task: Task) -> Environment:
    env = spec.new_episode()
    await env.reset(task, 0)
    return env


async def gold_episode(spec: TauSpec, task: Task, actions: list[Action]) -> float:
    env = await episode(spec, task)
    for a in actions:
        if (await env.step(a)).done:
            break
    reward = await env.grade()  # type: ignore[attr-defined]
    await env.close()
    return float(reward.total)


async def envlab_side(spec: TauSpec, op: str, tasks: list[Task], gold: dict[str, Any]) -> Any:
    """Times (and, for ``replay``, rewards) of envlab's side of ``op`` on ``tasks``."""
    times, rewards = [], []
    for task in tasks:
        t = time.perf_counter()
        if op == "data":
            Database(spec.domain, spec.environment.schema).close()
        elif op == "reset":
            env = await episode(spec, task)
        else:
            rewards.append(await gold_episode(spec, task, gold[task.id]))
        times.append(time.perf_counter() - t)
        if op == "reset":
            await env.close()
    return {"times": times, "rewards": rewards}


async def noop_steps(spec: TauSpec, task: Task, n: int) -> list[float]:
    from envlab.core import ToolCall

    env = await episode(spec, task)
    noop = Action(tool_calls=[ToolCall("no_such_tool", {})])
    times = []
    for _ in range(n):
        t = time.perf_counter()
        await env.step(noop)
        times.append(time.perf_counter() - t)
    await env.close()
    return times


# --- the run ------------------------------------------------------------------------------------
ROWS = {"data": "fresh database", "reset": "episode start", "replay": "gold episode"}


async def run(spec: TauSpec, tau: TauBench, rounds: int, per_round: int) -> dict[str, Any]:
    tasks = list(spec.tasks())
    got = tau.ask(op="init", domain=spec.domain)
    if got["user_ids"] != [t.metadata["user_id"] for t in tasks]:
        raise SystemExit("the checkout's test tasks are not envlab's (user ids differ)")
    probe = spec.new_episode()
    gold = {t.id: probe.oracle_actions(t) for t in tasks}
    Database(spec.domain, spec.environment.schema).close()  # the pristine image, built once
    res: dict[str, Any] = {f"{s}.{op}": [] for s in ("envlab", "tau") for op in ROWS}
    res |= {"envlab.rewards": [], "tau.rewards": []}
    for r in range(-1, rounds):  # round -1: one untimed episode of each op on each side
        n = 1 if r < 0 else per_round
        batch = [tasks[(r * per_round + k) % len(tasks)] for k in range(n)]
        for op in ROWS:
            for side in ("envlab", "tau") if r % 2 == 0 else ("tau", "envlab"):
                if side == "envlab":
                    out = await envlab_side(spec, op, batch, gold)
                else:
                    out = tau.ask(op=op, **tau_request(op, batch, gold))
                if r >= 0:
                    res[f"{side}.{op}"] += out["times"]
                    res[f"{side}.rewards"] += out.get("rewards", [])
    res["envlab.noop"] = await noop_steps(spec, tasks[0], 200)
    res["tau.noop"] = tau.ask(op="noop_step", n=200)["times"]
    res["pipe"] = pipe_round_trips(tau, 200)
    return res


def tau_request(op: str, batch: list[Task], gold: dict[str, Any]) -> dict[str, Any]:
    if op == "data":
        return {"n": len(batch)}
    if op == "reset":
        return {"tasks": [t.metadata["index"] for t in batch]}
    eps = [{"index": t.metadata["index"], "actions": as_tau(gold[t.id])} for t in batch]
    return {"episodes": eps}


def pipe_round_trips(tau: TauBench, n: int) -> list[float]:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        tau.ask(op="noop")
        times.append(time.perf_counter() - t)
    return times


def report(res: dict[str, Any], title: str) -> str:
    med = statistics.median
    lines = [title, f"  {'':22} {'envlab p50':>12} {'τ-bench p50':>12} {'envlab/τ-bench':>15}"]
    for op, name in ROWS.items():
        e, t = med(res[f"envlab.{op}"]), med(res[f"tau.{op}"])
        lines.append(f"  {name:22} {e * 1e3:9.3f} ms {t * 1e3:9.3f} ms {e / t:14.4f}x")
    e_eps = len(res["envlab.replay"]) / sum(res["envlab.replay"])
    t_eps = len(res["tau.replay"]) / sum(res["tau.replay"])
    lines.append(f"  {'gold episodes/s':22} {e_eps:12.1f} {t_eps:12.2f} {e_eps / t_eps:14.1f}x")
    n = len(res["envlab.rewards"])
    ok = [sum(x == 1.0 for x in res[f"{s}.rewards"]) for s in ("envlab", "tau")]
    lines.append(f"  reward 1.0: envlab {ok[0]}/{n}, τ-bench {ok[1]}/{n} of the same episodes")
    en, tn, pipe = med(res["envlab.noop"]), med(res["tau.noop"]), med(res["pipe"])
    lines.append(
        f"  floor: a no-op step (unknown tool) envlab {en * 1e6:.1f} µs, τ-bench {tn * 1e6:.1f} µs"
    )
    lines.append(
        f"         pipe round trip to τ-bench's process {pipe * 1e6:.0f} µs (in no figure)"
    )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tau-bench", metavar="DIR", help="a τ-bench checkout ($TAU_BENCH_DIR)")
    p.add_argument("--domain", choices=["retail", "airline"], default="retail")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tasks", type=int, default=10, help="tasks per round (each op, each side)")
    args = p.parse_args()
    src = checkout(args.tau_bench)
    tau = TauBench(ensure_venv(src))
    spec: TauSpec = TauRetail() if args.domain == "retail" else TauAirline()
    try:
        res = asyncio.run(run(spec, tau, args.rounds, args.tasks))
    finally:
        tau.close()
    n = args.rounds * args.tasks
    title = f"tau-{args.domain}, test split: {args.rounds} interleaved rounds, {n} episodes a row"
    print(report(res, title))


if __name__ == "__main__":
    main()
