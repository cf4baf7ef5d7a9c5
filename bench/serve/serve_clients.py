"""The clients of ``bench/serve.py``: P processes, each driving its share of the sessions over
raw ``websockets`` connections; the parent gathers their latencies and their common span."""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import time
from typing import Any

TIMEOUT_S = 600.0
STEP = json.dumps({"type": "step", "data": {"text": "hello"}})


async def play(ws: Any, pairs: int, seed0: int, lat: list[float] | None) -> None:
    for i in range(pairs):
        t = time.perf_counter()
        await ws.send(json.dumps({"type": "reset", "data": {"seed": seed0 + i}}))
        r = json.loads(await ws.recv())
        await ws.send(STEP)
        s = json.loads(await ws.recv())
        if lat is not None:
            lat.append(time.perf_counter() - t)
        if r["type"] != "observation" or s["data"]["observation"]["text"] != "hello":
            raise RuntimeError(f"unexpected frames: {r} {s}")


async def client_job(job: dict[str, Any], ready: Any, go: Any) -> dict[str, Any]:
    """One client process's share: open its sessions, play the warm-up pairs, say ready, wait
    for go (every client at once), then play the timed pairs; their latencies and the span."""
    from websockets.asyncio.client import connect

    n, seed0 = job["sessions"], job["seed0"]
    conns = [await connect(job["url"], max_size=None, compression=None) for _ in range(n)]
    try:
        warm = (play(c, job["warmup"], seed0 + 100_000 * k, None) for k, c in enumerate(conns))
        await asyncio.gather(*warm)
        ready.put(None)
        go.get()  # blocks the loop: the sessions are idle until every client is ready
        lat: list[float] = []
        t0 = time.perf_counter()  # CLOCK_MONOTONIC: the same clock in every process
        await asyncio.gather(
            *(play(c, job["pairs"], seed0 + 1000 * k, lat) for k, c in enumerate(conns))
        )
        t1 = time.perf_counter()
    finally:
        for c in conns:
            await c.close()
    return {"lat": lat, "t0": t0, "t1": t1}


def client_loop(jobs: Any, ready: Any, go: Any, results: Any) -> None:
    """A client process: plays every job it is given until it is given None."""
    while (job := jobs.get()) is not None:
        try:
            results.put(asyncio.run(client_job(job, ready, go)))
        except Exception as e:  # the parent raises it, whichever queue it waits on
            ready.put(f"client failed: {e!r}")
            results.put({"error": f"client failed: {e!r}"})


class Clients:
    """P client processes; ``measure`` splits S sessions over min(P, S) of them."""

    def __init__(self, n: int) -> None:
        ctx = mp.get_context("spawn")
        self.ready, self.results = ctx.Queue(), ctx.Queue()
        self.jobs = [ctx.Queue() for _ in range(n)]
        self.go = [ctx.Queue() for _ in range(n)]
        self.procs = [
            ctx.Process(
                target=client_loop,
                args=(self.jobs[k], self.ready, self.go[k], self.results),
                daemon=True,
            )
            for k in range(n)
        ]
        for p in self.procs:
            p.start()

    def measure(
        self, url: str, sessions: int, total_pairs: int, warmup: int
    ) -> tuple[list[float], float]:
        """Latencies of about ``total_pairs`` pairs over ``sessions`` connections, and the wall
        time from the first client's start to the last one's end."""
        per = max(1, total_pairs // sessions)
        used = min(len(self.procs), sessions)
        for k in range(used):
            share = sessions // used + (k < sessions % used)
            job = {
                "url": url,
                "sessions": share,
                "pairs": per,
                "warmup": warmup,
                "seed0": 10**7 * k,
            }
            self.jobs[k].put(job)
        for _ in range(used):
            if (said := self.ready.get(timeout=TIMEOUT_S)) is not None:
                raise RuntimeError(said)
        for k in range(used):
            self.go[k].put(None)
        got = [self.results.get(timeout=TIMEOUT_S) for _ in range(used)]
        if failed := [g["error"] for g in got if "error" in g]:
            raise RuntimeError(failed[0])
        lat = [x for g in got for x in g["lat"]]
        return lat, max(g["t1"] for g in got) - min(g["t0"] for g in got)

    def close(self) -> None:
        for q in self.jobs:
            q.put(None)
        for p in self.procs:
            p.join(30)
