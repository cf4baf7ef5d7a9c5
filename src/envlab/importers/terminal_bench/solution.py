"""A Terminal-Bench 1 ``solution.yaml`` (keystrokes for one tmux shell) as a ``solve.sh``.

Harbor refuses these tasks; envlab converts them, simply: every ``command`` runs in order in one
bash, as the keystrokes ran in one shell (``cd`` and ``export`` carry over; a failing command
does not stop the rest, there is no ``set -e``). Waiting is implied, since each command finishes
before the next starts. Two cases are not plain commands:

- a ``block: false`` command that obviously starts something long-running (a server, see
  ``LONG_RUNNING``) runs in the background with ``nohup ... &``, then ``min_timeout_sec`` of sleep;
- a bare interactive interpreter (``python``, ``python3``, ``ipython``, ``node``) typed into the
  shell reads the commands after it, up to ``quit()``/``exit()``/``exit``: they are fed to it
  through a here-document.

``append_enter: false`` (keys typed without Enter) joins the command with the next one.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from envlab.importers.terminal_bench.compose import problems

LONG_RUNNING = re.compile(
    r"(http\.server|uvicorn|gunicorn|flask\s+run|redis-server|mongod\b|nginx|httpd|"
    r"npm\s+(run\s+)?(start|dev|serve)|node\s+\S*server\S*\.js|jupyter\s+(notebook|lab)|"
    r"\bserve\b|\S*server\S*\.py|python\S*\s+-m\s+\S*server|tail\s+-f)"
)
"""Commands that obviously keep running: run in the background when ``block: false``."""
REPLS = {"python", "python3", "ipython", "ipython3", "node"}
REPL_EXITS = {"quit()", "exit()", "exit", ".exit", "quit"}

HEADER = """#!/bin/bash
# Converted by envlab from this task's Terminal-Bench solution.yaml: the keystrokes TB1 typed
# into one tmux shell, here run in order in one bash. State (cd, export) carries over; a failing
# command does not stop the rest (no set -e), as in the shell. A block: false command that starts
# a server runs in the background (nohup ... &); a bare interpreter (python, node) gets the
# commands typed after it, up to quit()/exit(), through a here-document.
"""


class SolutionStep(BaseModel):
    """One entry of ``solution.yaml``."""

    model_config = ConfigDict(extra="ignore")

    command: str
    min_timeout_sec: float = Field(0.0, ge=0, allow_inf_nan=False)
    block: bool = False
    append_enter: bool = True


def parse_steps(raw: Any) -> list[SolutionStep]:
    """The steps of a parsed ``solution.yaml`` (a list of mappings); joined by append_enter."""
    if not isinstance(raw, list) or not raw:
        raise ValueError("solution.yaml is not a non-empty list of {command, ...} entries")
    try:
        steps = TypeAdapter(list[SolutionStep]).validate_python(raw)
    except ValidationError as e:
        raise ValueError(problems("solution.yaml", e)) from None
    joined: list[SolutionStep] = []
    pending = ""
    for step in steps:
        if not step.append_enter:
            pending += step.command
            continue
        joined.append(step.model_copy(update={"command": pending + step.command}))
        pending = ""
    if pending:
        joined.append(SolutionStep(command=pending))
    return joined


def _repl_block(steps: list[SolutionStep], start: int) -> tuple[list[str], int]:
    """The here-document feeding ``steps[start+1:]`` to the interpreter ``steps[start]``."""
    body: list[str] = []
    i = start + 1
    while i < len(steps):
        line = steps[i].command.rstrip("\n")
        body.append(line)
        i += 1
        if line.strip() in REPL_EXITS:
            break
    tag = "ENVLAB_REPL_EOF"
    while any(tag in b for b in body):
        tag += "_"
    return [f"{steps[start].command.strip()} <<'{tag}'", *body, tag], i


def _starts_server(step: SolutionStep, cmd: str) -> bool:
    """A one-line, non-blocking command that obviously keeps running (not already ``&``)."""
    one_line = "\n" not in cmd.strip()
    return not step.block and one_line and bool(LONG_RUNNING.search(cmd)) and not cmd.endswith("&")


def solve_sh_from_steps(raw: Any) -> tuple[str, list[str]]:
    """``solve.sh`` for a parsed ``solution.yaml``, and notes on what was not run as typed."""
    steps = parse_steps(raw)
    lines: list[str] = [HEADER]
    notes: list[str] = []
    i = 0
    while i < len(steps):
        step = steps[i]
        cmd = step.command.rstrip("\n")
        if cmd.strip() in REPLS:
            block, end = _repl_block(steps, i)
            lines += block
            notes.append(f"fed the {end - i - 1} lines typed after {cmd.strip()} to it")
            i = end
            continue
        if _starts_server(step, cmd):
            log = f"/tmp/solve-background-{i}.log"
            lines.append(f"nohup bash -c {shlex.quote(cmd)} > {log} 2>&1 &")
            if step.min_timeout_sec > 0:
                lines.append(f"sleep {step.min_timeout_sec:g}")
            notes.append(f"in the background: {cmd[:60]}")
        else:
            lines.append(cmd)
        i += 1
    return "\n".join(lines) + "\n", notes
