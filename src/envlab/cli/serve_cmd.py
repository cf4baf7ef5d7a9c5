"""``envlab serve``: serve an environment over OpenEnv's WebSocket protocol (docs/serve.md)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from envlab.cli import options as O
from envlab.cli.console import err


def serve_cmd(
    env: Annotated[
        str,
        typer.Argument(
            metavar="ENV",
            help="Environment: a name (see `envlab envs`), module:Class, file.py:Class, "
            "or a task folder path.",
        ),
    ],
    host: Annotated[str, typer.Option(help="Address to listen on (loopback by default).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option("--port", "-p", help="TCP port.")] = 8000,
    max_sessions: Annotated[
        int,
        typer.Option("--max-sessions", help="Sessions (episodes) at once; beyond: refused."),
    ] = 64,
    idle_timeout: Annotated[
        float,
        typer.Option(
            "--idle-timeout", help="Seconds a session may stay silent before it is closed."
        ),
    ] = 600.0,
    request_timeout: Annotated[
        float,
        typer.Option(
            "--request-timeout",
            help="Seconds one HTTP request may take to arrive, headers and body; a slower one "
            "is cut off (a client trickling bytes cannot hold a socket).",
        ),
    ] = 30.0,
    env_arg: O.EnvArgOption = None,
    sandbox: Annotated[
        str | None,
        typer.Option("--sandbox", metavar="bwrap|local", help="Sandbox of task folders."),
    ] = None,
    max_steps: Annotated[
        int | None, typer.Option("--max-steps", help="Steps per episode (default: the task's).")
    ] = None,
    step_timeout: Annotated[
        float | None,
        typer.Option("--step-timeout", help="Seconds per step (default: the task's)."),
    ] = None,
    episode_timeout: Annotated[
        float | None,
        typer.Option("--episode-timeout", help="Seconds per episode (default: the task's)."),
    ] = None,
    grade_timeout: Annotated[
        float | None,
        typer.Option("--grade-timeout", help="Seconds to grade (default: the task's)."),
    ] = None,
    as_json: O.JsonOption = False,
) -> None:
    """Serve ENV at ws://HOST:PORT/ws, wire-compatible with OpenEnv's clients.

    Each session owns a fresh episode (and sandbox); the episode is graded on the server and
    the reward with its components comes in the last frame. Drive it with OpenEnv's
    GenericEnvClient, or with envlab itself: envlab eval ws://HOST:PORT --agent ...
    """
    from envlab.cli.options import limit_overrides, open_env, parse_kv
    from envlab.serve.server import require_serve, serve

    require_serve()  # before loading anything: say how to install the extra
    spec = open_env(env, parse_kv(env_arg or [], "--env-arg"), sandbox)
    limits = limit_overrides(max_steps, step_timeout, episode_timeout, grade_timeout)
    details = {
        "url": f"ws://{host}:{port}/ws",
        "env": spec.name,
        "content_hash": spec.content_hash(),
        "max_sessions": max_sessions,
        "idle_timeout": idle_timeout,
    }
    if as_json:
        print(json.dumps(details), flush=True)
    else:
        err().print(
            f"serving [bold]{spec.name}[/] ({spec.content_hash()}) at {details['url']} "
            f"(up to {max_sessions} sessions, idle ones closed after {idle_timeout:g}s)\n"
            f"drive it with: envlab eval ws://{host}:{port} --agent ..."
        )
    if host not in ("127.0.0.1", "localhost", "::1"):
        err().print(f"[yellow]warning:[/] listening on {host}: the server has no authentication")
    serve(
        spec,
        host=host,
        port=port,
        max_sessions=max_sessions,
        idle_timeout=idle_timeout,
        limits=limits,
        request_timeout_s=request_timeout,
    )
