"""Benchmark: reset+step pairs over the WebSocket, envlab's server vs OpenEnv's own server,
each read against a floor: what the clients and the transport reach with no server work at all.

Every server answers the same trivial echo environment (reset answers a prompt, step echoes the
action's text, the episode never ends, so nothing is graded), each in its own process (127.0.0.1,
no Docker), driven by the same raw ``websockets`` clients with the same frames:
``{"type": "reset", "data": {"seed": i}}`` then ``{"type": "step", "data": {"text": "hello"}}``.
One pair is timed from sending the reset to reading the step's answer. With S concurrent
sessions, S connections each play pairs back to back, split over min(P, S) client processes
(``--clients P``, default min(4, CPUs); ``bench/serve/serve_clients.py``): each opens its share
and plays the warm-up pairs, then all start together; throughput is all timed pairs over the span
from the first client's start to the last one's end. Rounds alternate the servers' order, at
least 10 timed pairs per session and round (the ``pairs`` column says how many were timed).

Servers, the floor first (``/floor``: a row's pairs/s over the floor's at that level):
- ``floor``: a bare ``websockets`` server (no ASGI, no framework, no environment) answering every
  frame, parsed as JSON, with a fixed observation frame;
- ``uvicorn-bare``: a bare ASGI WebSocket on uvicorn answering the same: what uvicorn adds;
- ``envlab``: ``envlab.serve.server.serve`` (as ``envlab serve`` runs it);
- ``openenv``: ``openenv.core.env_server.create_app`` with a sync ``Environment`` (the usual way
  to write one) on uvicorn's defaults; ``openenv-async``: the same environment with
  ``reset_async``/``step_async``, which OpenEnv awaits without its thread pool.

    python bench/serve.py                         # 1, 8, 64 sessions; a table with ratios
    python bench/serve.py --pairs 3000 --json     # more pairs; JSON too

The client processes share the machine's cores with the server under test: on few cores the
floor is what the clients, the server and the kernel reach together, and a server's ratio to it
is a share of the same CPU, not a transport limit; more client processes than free cores add
contention, not load. Measured so on a 2-core machine, with a test suite running beside it
(load average about 3), so every figure is low and noisy:

    $ python bench/serve.py --pairs 500
    2 client processes, 2 CPUs shared with the servers
    server         sessions  pairs   p50 ms   p95 ms   pairs/s  /floor   envlab/this: p50  pairs/s
    floor                 1    498    0.637    0.824      1484   1.00x
    uvicorn-bare          1    498    0.708    0.918      1329   0.90x
    envlab                1    498    0.863    1.131      1097   0.74x
    openenv               1    498    1.424    2.175       648   0.44x             0.61x    1.69x
    openenv-async         1    498    0.965    1.611       890   0.60x             0.89x    1.23x
    floor                 8    480    3.661    5.257      1854   1.00x
    uvicorn-bare          8    480    4.485    6.030      1712   0.92x
    envlab                8    480    5.939    7.779      1293   0.70x
    openenv               8    480    9.308   11.984       705   0.38x             0.64x    1.83x
    openenv-async         8    480    7.443   10.176      1029   0.56x             0.80x    1.26x
    floor                64   3840   27.838   49.044      1932   1.00x
    uvicorn-bare         64   3840   34.972   55.910      1603   0.83x
    envlab               64   3840   45.741   80.162      1237   0.64x
    openenv              64   3840   64.102  113.297       891   0.46x             0.71x    1.39x
    openenv-async        64   3840   58.488   90.170       965   0.50x             0.78x    1.28x

There the floor is above every server at every level (the old single-client 64-session floor was
below them all). At 64 sessions, floor and envlab alone: 1 client process, floor 2401 pairs/s,
envlab 1326 (0.55x); 2 client processes, floor 2265, envlab 1423 (0.63x): on 2 cores a second
client process buys nothing, the cores are the bound. On a machine with cores to spare for the
clients, the floor rises and the ratios say what each server costs.
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
sys.path.insert(0, str(ROOT / "bench" / "serve"))  # serve_clients, here and in the clients
SERVERS = ("floor", "uvicorn-bare", "envlab", "openenv", "openenv-async")


# --- the echo environment, once per framework -----------------------------------------------
def envlab_echo_spec() -> Any:
    from envlab.core import Environment, EnvSpec, Observation, StepResult, Task, TaskSet
    from envlab.core.limits import Limits

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

    return Echo()


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


async def floor_server(port: int) -> None:
    """The floor: a bare ``websockets`` server, no ASGI, no framework, no environment, answering
    every frame (parsed as JSON) with a fixed observation frame; ``/health`` over plain HTTP."""
    from http import HTTPStatus

    from websockets.asyncio.server import ServerConnection, serve
    from websockets.http11 import Request, Response

    obs = {"observation": {"text": "hello"}, "reward": None, "done": False}
    answer = json.dumps({"type": "observation", "data": obs})

    def health(conn: ServerConnection, request: Request) -> Response | None:
        return conn.respond(HTTPStatus.OK, "ok\n") if request.path == "/health" else None

    async def echo(ws: ServerConnection) -> None:
        async for frame in ws:
            json.loads(frame)
            await ws.send(answer)

    async with serve(
        echo, "127.0.0.1", port, process_request=health, max_size=None, compression=None
    ) as server:
        await server.serve_forever()


async def uvicorn_bare_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """uvicorn with no framework and no environment: a bare ASGI WebSocket answering as the
    floor does. What uvicorn adds to the floor, under both servers."""
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
        asyncio.run(floor_server(port))
    elif kind == "uvicorn-bare":
        uvicorn.run(
            uvicorn_bare_app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            ws="websockets-sansio",
        )
    elif kind == "envlab":
        from envlab.serve.server import serve

        serve(envlab_echo_spec(), host="127.0.0.1", port=port, max_sessions=256)
    else:
        app = openenv_echo_app(kind == "openenv-async")
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


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
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                return proc, port
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the {kind} server did not start")


MIN_PER_SESSION = 10
"""Timed pairs per session and round at least, so that a round's span is not one round trip."""


def bench(
    kinds: list[str], levels: list[int], pairs: int, warmup: int, rounds: int, clients: int
) -> list[dict[str, Any]]:
    """Every server up at once; at each level, ``rounds`` rounds that play each server in turn
    (``pairs / rounds`` pairs each), so that a slow moment of a shared machine falls on all."""
    from serve_clients import Clients

    procs: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    pool = Clients(clients)
    rows = []
    try:
        for k in kinds:
            procs[k] = start(k)
        for n in levels:
            lat: dict[str, list[float]] = {k: [] for k in kinds}
            wall = dict.fromkeys(kinds, 0.0)
            per_round = max(pairs // rounds, MIN_PER_SESSION * n)
            for r in range(rounds):
                for k in kinds if r % 2 == 0 else kinds[::-1]:
                    url = f"ws://127.0.0.1:{procs[k][1]}/ws"
                    got, w = pool.measure(url, n, per_round, warmup)
                    lat[k] += got
                    wall[k] += w
            for k in kinds:
                rows.append(summary(k, n, lat[k], wall[k]))
                print(f"  {k:14} {n:3} sessions: p50 {rows[-1]['p50_ms']:.3f} ms", file=sys.stderr)
    finally:
        pool.close()
        for proc, _ in procs.values():
            proc.terminate()
            proc.wait(30)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    by = {(r["server"], r["sessions"]): r for r in rows}
    out = [
        f"{'server':14} {'sessions':>8} {'pairs':>6} {'p50 ms':>8} {'p95 ms':>8} {'pairs/s':>9}"
        f" {'/floor':>7}   envlab/this: p50  pairs/s"
    ]
    for r in rows:
        mine, floor = by.get(("envlab", r["sessions"])), by.get(("floor", r["sessions"]))
        of_floor = f"{r['pairs_per_s'] / floor['pairs_per_s']:6.2f}x" if floor else " " * 7
        ratio = ""
        if mine is not None and r["server"] in ("openenv", "openenv-async"):
            ratio = (
                f"   {mine['p50_ms'] / r['p50_ms']:14.2f}x "
                f"{mine['pairs_per_s'] / r['pairs_per_s']:7.2f}x"
            )
        out.append(
            f"{r['server']:14} {r['sessions']:8} {r['pairs']:6} {r['p50_ms']:8.3f} "
            f"{r['p95_ms']:8.3f} {r['pairs_per_s']:9.0f} {of_floor}{ratio}"
        )
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--pairs", type=int, default=2000, help="timed pairs per level (all sessions)")
    p.add_argument("--warmup", type=int, default=10, help="untimed pairs per session and round")
    p.add_argument("--rounds", type=int, default=6, help="rounds alternating the servers")
    p.add_argument("--sessions", default="1,8,64", help="concurrency levels")
    p.add_argument("--clients", type=int, default=min(4, os.cpu_count() or 1))
    p.add_argument("--servers", default=",".join(SERVERS), help="floor first: the ratios' base")
    p.add_argument("--json", action="store_true", help="print the rows as JSON too")
    p.add_argument("--server", choices=SERVERS, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.server:
        run_server(a.server, a.port)
        return
    levels = [int(x) for x in a.sessions.split(",")]
    kinds = a.servers.split(",")
    rows = bench(kinds, levels, a.pairs, a.warmup, a.rounds, a.clients)
    print(f"{a.clients} client processes, {os.cpu_count()} CPUs shared with the servers")
    print(table(rows))
    if a.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
