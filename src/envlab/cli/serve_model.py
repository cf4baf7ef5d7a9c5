"""``envlab serve-model``: serve a local GGUF model (default: the embedded SmolLM2) over the
OpenAI chat-completions API on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from envlab.cli import options as O
from envlab.cli.console import err


def serve_model_cmd(
    model: Annotated[
        Path | None,
        typer.Option(
            "--model", "-m", help="GGUF file to serve (default: the embedded SmolLM2-135M)."
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option("--name", help="Model name clients ask for (default: smollm2, or the stem)."),
    ] = None,
    host: Annotated[str, typer.Option(help="Address to listen on (loopback by default).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option("--port", "-p", help="TCP port.")] = 8000,
    n_ctx: Annotated[int, typer.Option("--n-ctx", help="Context length in tokens.")] = 4096,
    threads: Annotated[
        int | None, typer.Option("--threads", help="CPU threads (default: all available).")
    ] = None,
    as_json: O.JsonOption = False,
) -> None:
    """Serve a local model at http://HOST:PORT/v1 (/models, /chat/completions with tools).

    llama.cpp runs it, or torch where llama-cpp-python is not installed; ENVLAB_ENGINE=llamacpp
    or ENVLAB_ENGINE=torch chooses.

    Agents reach it with --agent openai:NAME@http://HOST:PORT/v1. Responses carry the prompt and
    completion token ids and, with logprobs=true, per-token logprobs.
    """
    from envlab.models.local import new_engine, require_local

    require_local("envlab serve-model")  # before loading anything: say how to install the extra
    from envlab.models.server import serve
    from envlab.models.weights import SMOLLM2_MODEL_ID, smollm2_path

    if model is None:
        path, served, model_id = smollm2_path(), name or "smollm2", SMOLLM2_MODEL_ID
    else:
        path, served, model_id = model, name or model.stem, model.stem
    engine = new_engine(path, model_id=model_id, n_ctx=n_ctx, n_threads=threads)
    url = f"http://{host}:{port}/v1"
    details = {
        "url": url,
        "model": served,
        "model_id": model_id,
        "path": str(path),
        "engine": engine.backend,
        "weights_hash": engine.weights_hash,
        "n_ctx": engine.n_ctx,
        "threads": engine.n_threads,
        "load_s": round(engine.load_s, 3),
    }
    if as_json:
        print(json.dumps(details), flush=True)
    else:
        err().print(
            f"serving [bold]{served}[/] ({path.name}, {engine.weights_hash[:19]}…) at {url} "
            f"(loaded by {engine.backend} in {engine.load_s:.2f}s, {engine.n_threads} threads)\n"
            f"use it with: envlab eval calc --agent openai:{served}@{url}"
        )
    if host not in ("127.0.0.1", "localhost", "::1"):
        err().print(f"[yellow]warning:[/] listening on {host}: the server has no authentication")
    serve(engine, served_name=served, host=host, port=port)
