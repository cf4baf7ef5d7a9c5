"""Benchmark: reset+step pairs over the WebSocket, envlab's server vs OpenEnv's own server.

Both serve the same trivial echo environment (reset answers a prompt, step echoes the action's
text, the episode never ends, so nothing is graded), each in its own process on uvicorn
(127.0.0.1, no Docker), driven by the same raw ``websockets`` client with the same frames:
``{"type": "reset", "data": {"seed": i}}`` then ``{"type": "step", "data": {"text": "hello"}}``.
One pair is timed from sending the reset to reading the step's answer. With S concurrent
sessions, S connections each play pairs back to back; throughput is all pairs / wall time.

    python bench/serve.py                       # 1, 8, 64 sessions; a table with ratios
    python bench/serve.py --pairs 3000 --json   # more pairs; JSON too

Servers: ``envlab`` (``envlab.serve.create_app``, uvicorn as ``envlab serve`` runs it),
``openenv`` (``openenv.core.env_server.create_app`` with a sync ``Environment``, the usual way
to write one, on uvicorn's defaults) and ``openenv-async`` (the same environment with
``reset_async``/``step_async``, which OpenEnv awaits without its thread pool).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SERVERS = ("envlab", "openenv", "openenv-async", "floor")


# --- the echo environment, once per framework -----------------------------------------------
def envlab_echo_app() -> Any:
    from envlab.core import Environment, EnvSpec, Observation, StepResult, Task, TaskSet
    from envlab.core.limits import Limits
    from envlab.serve.app import create_app

    class EchoEpisode(Environment):
        def __init__(self, spec: EnvSpec) -> None:
            pass

        async def reset(self, task: Task, seed: int | None = None) -> Observation:
            return Observation(text=task.prompt)

        async def step(self, action: Any) -> StepResult:
            return StepResult(Observation(text=action.text), 0.0)

    class Echo(EnvSpec):
        id = "echo"
        environment = EchoEpisode
        default_limits = Limits(max_steps=None)

        def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
            return TaskSet([Task(id="echo-0", prompt="say something")])

    return create_app(Echo(), max_sessions=256)


def openenv_echo_app(use_async: bool) -> Any:
    from openenv.core.env_server import Action, Environment, Observation, State, create_app

    class EchoAction(Action):
        text: str = ""

    class EchoObservation(Observation):
        text: str = ""

    class EchoEnv(Environment):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self) -> None:
            super().__init__()
            self._state = State(episode_id=None, step_count=0)

        def reset(self, seed: int | None = None, episode_id: str | None = None, **_: Any) -> Any:
            self._state = State(episode_id=episode_id, step_count=0)
            return EchoObservation(text="say something", done=False, reward=None)

        def step(self, action: Any, timeout_s: float | None = None, **_: Any) -> Any:
            self._state.step_count += 1
            return EchoObservation(text=action.text, done=False, reward=0.0)

        @property
        def state(self) -> State:
            return self._state

    class AsyncEchoEnv(EchoEnv):
        async def reset_async(self, seed: int | None = None, **kw: Any) -> Any:
            return self.reset(seed, **kw)

        async def step_async(self, action: Any, timeout_s: float | None = None, **kw: Any) -> Any:
            return self.step(action, timeout_s, **kw)

    env_cls = AsyncEchoEnv if use_async else EchoEnv
    return create_app(
        env_cls, EchoAction, EchoObservation, env_name="echo", max_concurrent_envs=256
    )


async def floor_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """No framework, no environment: a bare ASGI WebSocket answering every frame with a fixed
    observation frame. What the client, uvicorn and loopback TCP cost on their own."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})
        return
    await receive()
    await send({"type": "websocket.accept"})
    while (m := await receive())["type"] != "websocket.disconnect":
        json.loads(m["text"])
        obs = {"observation": {"text": "hello"}, "reward": None, "done": False}
        await send(
            {"type": "websocket.send", "text": json.dumps({"type": "observation", "data": obs})}
        )


def run_server(kind: str, port: int) -> None:
    import uvicorn

    if kind == "floor":
        uvicorn.run(
            floor_app, host="127.0.0.1", port=port, log_level="warning", ws="websockets-sansio"
        )
    elif kind == "envlab":
        from envlab.serve.server import _uvicorn_config

        uvicorn.Server(_uvicorn_config(envlab_echo_app(), "127.0.0.1", port, "warning")).run()
    else:
        app = openenv_echo_app(kind == "openenv-async")
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


# --- the client ---------------------------------------------------------------------------------
async def play(url: str, pairs: int, warmup: int, lat: list[float], seed0: int) -> None:
    from websockets.asyncio.client import connect

    step = json.dumps({"type": "step", "data": {"text": "hello"}})
    async with connect(url, max_size=None, compression=None) as ws:
        for i in range(warmup + pairs):
            t = time.perf_counter()
            await ws.send(json.dumps({"type": "reset", "data": {"seed": seed0 + i}}))
            r = json.loads(await ws.recv())
            await ws.send(step)
            s = json.loads(await ws.recv())
            if i >= warmup:
                lat.append(time.perf_counter() - t)
            if r["type"] != "observation" or s["data"]["observation"]["text"] != "hello":
                raise RuntimeError(f"unexpected frames: {r} {s}")


async def measure(
    url: str, sessions: int, total_pairs: int, warmup: int
) -> tuple[list[float], float]:
    """Latencies of ``total_pairs`` pairs over ``sessions`` connections, and the wall time of
    the timed part (the warm-up pairs' share taken out)."""
    per = max(1, total_pairs // sessions)
    lat: list[float] = []
    t = time.perf_counter()
    await asyncio.gather(*(play(url, per, warmup, lat, 1000 * k) for k in range(sessions)))
    wall = time.perf_counter() - t
    return lat, wall * per / (per + warmup)


def summary(server: str, sessions: int, lat: list[float], wall: float) -> dict[str, Any]:
    lat = sorted(lat)
    return {
        "server": server,
        "sessions": sessions,
        "pairs": len(lat),
        "p50_ms": 1000 * statistics.median(lat),
        "p95_ms": 1000 * lat[int(0.95 * (len(lat) - 1))],
        "pairs_per_s": len(lat) / wall,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(kind: str) -> tuple[subprocess.Popen[bytes], int]:
    import httpx

    port = free_port()
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    proc = subprocess.Popen(
        [sys.executable, __file__, "--server", kind, "--port", str(port)], env=env
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                return proc, port
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the {kind} server did not start")


def bench(
    kinds: list[str], levels: list[int], pairs: int, warmup: int, rounds: int
) -> list[dict[str, Any]]:
    """Every server up at once; at each level, ``rounds`` rounds that play each server in turn
    (``pairs / rounds`` pairs each), so that a slow moment of a shared machine falls on all."""
    procs = {k: start(k) for k in kinds}
    rows = []
    try:
        for n in levels:
            lat: dict[str, list[float]] = {k: [] for k in kinds}
            wall = dict.fromkeys(kinds, 0.0)
            for r in range(rounds):
                order = kinds if r % 2 == 0 else kinds[::-1]
                for k in order:
                    url = f"ws://127.0.0.1:{procs[k][1]}/ws"
                    got, w = asyncio.run(measure(url, n, pairs // rounds, warmup))
                    lat[k] += got
                    wall[k] += w
            for k in kinds:
                rows.append(summary(k, n, lat[k], wall[k]))
                print(f"  {k:14} {n:3} sessions: p50 {rows[-1]['p50_ms']:.3f} ms", file=sys.stderr)
    finally:
        for proc, _ in procs.values():
            proc.terminate()
            proc.wait(30)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    by = {(r["server"], r["sessions"]): r for r in rows}
    out = [
        f"{'server':14} {'sessions':>8} {'pairs':>6} {'p50 ms':>8} {'p95 ms':>8} {'pairs/s':>9}"
        "   envlab/this: p50  pairs/s"
    ]
    for r in rows:
        mine = by.get(("envlab", r["sessions"]))
        ratio = ""
        if mine is not None and r["server"] not in ("envlab", "floor"):
            ratio = (
                f"   {mine['p50_ms'] / r['p50_ms']:14.2f}x "
                f"{mine['pairs_per_s'] / r['pairs_per_s']:7.2f}x"
            )
        out.append(
            f"{r['server']:14} {r['sessions']:8} {r['pairs']:6} {r['p50_ms']:8.3f} "
            f"{r['p95_ms']:8.3f} {r['pairs_per_s']:9.0f}{ratio}"
        )
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--pairs", type=int, default=2000, help="timed pairs per level (all sessions)")
    p.add_argument("--warmup", type=int, default=10, help="untimed pairs per session and round")
    p.add_argument("--rounds", type=int, default=6, help="rounds alternating the servers")
    p.add_argument("--sessions", default="1,8,64", help="concurrency levels")
    p.add_argument("--servers", default=",".join(SERVERS))
    p.add_argument("--json", action="store_true", help="print the rows as JSON too")
    p.add_argument("--server", choices=SERVERS, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.server:
        run_server(a.server, a.port)
        return
    levels = [int(x) for x in a.sessions.split(",")]
    rows = bench(a.servers.split(","), levels, a.pairs, a.warmup, a.rounds)
    print(table(rows))
    if a.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
