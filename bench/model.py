"""The embedded model's speed: in-process vs through ``envlab serve-model`` (real HTTP).

Sends the same chat requests (greedy, ``--max-tokens`` each, logprobs on) three ways and prints
completion tokens/s side by side, with the load times:

- ``engine``: ``LlamaCppEngine.chat`` called directly (no HTTP at all, the floor);
- ``in-process``: what ``--agent smollm2`` does: ``OpenAICompatModel`` -> ``httpx.ASGITransport``
  -> the serve-model FastAPI app -> the engine, in this process;
- ``serve-model``: ``envlab serve-model`` in a subprocess, ``OpenAICompatModel`` over TCP.

    python bench/model.py                   # 6 requests x 128 tokens
    python bench/model.py --requests 10 --max-tokens 256 --threads 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from typing import Any

import httpx

from envlab.models.client import OpenAICompatModel
from envlab.models.llamacpp import LlamaCppEngine
from envlab.models.server import create_app, free_port
from envlab.models.weights import SMOLLM2_MODEL_ID, smollm2_path
from envlab.models.wire import ChatRequest

PROMPTS = [
    "Write a short story about a robot learning to paint.",
    "Explain how a bicycle works, step by step.",
    "Describe a walk through a forest in autumn.",
    "Write a letter to a friend about your new job.",
    "Explain why the sky is blue to a child.",
    "Describe your ideal weekend in detail.",
]


def requests(n: int) -> list[list[dict[str, Any]]]:
    return [[{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}] for i in range(n)]


def serve_model_argv(port: int, threads: int | None) -> list[str]:
    from envlab.cli.main import app

    extra = ["--port", str(port), "--json"] + (["--threads", str(threads)] if threads else [])
    if "serve-model" in {c.name for c in app.registered_commands}:
        return [sys.executable, "-m", "envlab.cli.main", "serve-model", *extra]
    code = "import typer; from envlab.cli.serve_model import serve_model_cmd as c; typer.run(c)"
    return [sys.executable, "-c", code, *extra]


async def via_client(
    model: OpenAICompatModel, convs: list[Any], max_tokens: int
) -> tuple[int, float]:
    tokens, t0 = 0, time.perf_counter()
    for msgs in convs:
        reply = await model.chat(msgs, max_tokens=max_tokens, temperature=0, seed=0)
        tokens += reply.usage.get("completion_tokens", 0)
    return tokens, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--requests", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    convs = requests(args.requests)

    t0 = time.perf_counter()
    engine = LlamaCppEngine(smollm2_path(), model_id=SMOLLM2_MODEL_ID, n_threads=args.threads)
    load_s = time.perf_counter() - t0
    app = create_app(engine, served_name="smollm2")

    port = free_port()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        serve_model_argv(port, args.threads),
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    try:
        details = json.loads(proc.stdout.readline() if proc.stdout else "{}")
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                if proc.poll() is not None:
                    raise SystemExit("serve-model exited before it was ready") from None
                time.sleep(0.05)
        ready_s = time.perf_counter() - t0
        totals = asyncio.run(measure(engine, app, details["url"], convs, args.max_tokens))
    finally:
        proc.terminate()
        proc.wait(timeout=10)

    print(
        f"SmolLM2-135M-Instruct Q4_1 (llama.cpp), {engine.n_threads} threads, "
        f"{args.requests} requests x up to {args.max_tokens} tokens, greedy, logprobs on; "
        "each path twice, in the order A B C C B A; load average "
        f"{os.getloadavg()[0]:.1f} (other processes slow every path alike)"
    )
    print(
        f"load: engine {load_s:.2f}s in-process; serve-model process ready in {ready_s:.2f}s "
        f"(engine load inside it {details.get('load_s', float('nan')):.2f}s)"
    )
    print(f"{'path':<22}{'tokens':>8}{'seconds':>10}{'tok/s':>9}{'vs engine':>11}")
    base = totals[0][1] / totals[0][2]
    for name, tokens, secs in totals:
        rate = tokens / secs
        print(f"{name:<22}{tokens:>8}{secs:>10.2f}{rate:>9.1f}{rate / base:>11.0%}")


async def measure(
    engine: LlamaCppEngine, app: Any, url: str, convs: list[Any], max_tokens: int
) -> list[tuple[str, int, float]]:
    """Each path runs all requests as one block; blocks go A B C then C B A, and add up.

    Blocks, not request-by-request turns: llama.cpp's worker threads spin for a while after each
    batch, so two processes taking quick turns would slow each other down.
    """
    names = ["engine (no HTTP)", "in-process (ASGI)", "serve-model (HTTP)"]
    tokens, secs = [0, 0, 0], [0.0, 0.0, 0.0]
    transport = httpx.ASGITransport(app=app)
    async with (
        OpenAICompatModel(
            "smollm2", "http://in-process/v1", transport=transport, logprobs=True
        ) as local,
        OpenAICompatModel("smollm2", url, logprobs=True) as remote,
    ):
        for model in (local, remote):  # warm up: page cache, first allocations, connections
            await model.chat(convs[0], max_tokens=8, temperature=0)

        async def block(i: int) -> tuple[int, float]:
            if i == 0:
                t0, n = time.perf_counter(), 0
                for msgs in convs:
                    req = ChatRequest(
                        messages=msgs, max_tokens=max_tokens, temperature=0, seed=0, logprobs=True
                    )
                    n += engine.chat(req).usage.completion_tokens  # type: ignore[union-attr]
                return n, time.perf_counter() - t0
            return await via_client(local if i == 1 else remote, convs, max_tokens)

        for i in (0, 1, 2, 2, 1, 0):
            n, dt = await block(i)
            tokens[i] += n
            secs[i] += dt
    return list(zip(names, tokens, secs, strict=True))


if __name__ == "__main__":
    main()
