"""A third-party grader run on the agent's answer, where the answer cannot reach envlab.

Some sources grade by evaluating the agent's text: reasoning-gym's ``string_insertion``,
``spiral_matrix``, ``binary_matrix`` and ``n_queens`` call ``eval(answer)``; ``countdown``,
``puzzle24`` and the integration datasets parse it with sympy, which ``eval``s too. Called in
envlab's process, an answer such as ``__import__('os').system(...)`` would run there: it could
rewrite the scores of every later episode of the run, or the records already written.

:func:`grade_isolated` runs the grader in a forked child that cannot touch envlab's memory,
with ``eval``/``exec`` limited to expressions without attribute access, dunder names or
dangerous builtins (literals, arithmetic, sympy's own calls pass; an escape does not), no
file writes (``RLIMIT_FSIZE`` 0), bounded CPU and memory. What the answer makes happen there
is the agent's: an exception or an exhausted CPU or memory budget is scored 0, with the reason.
A child that dies otherwise or stalls without using its CPU is the machinery's
(``GraderFailed``), never the agent's.
"""

from __future__ import annotations

import ast
import builtins
import json
import os
import resource
import select
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from envlab.core import GraderFailed

CPU_S = 10
"""CPU seconds one grading may use."""
MEMORY_BYTES = 2 << 30
"""Address space one grading may map beyond what the forked copy of envlab already maps."""
WALL_S = 60.0
"""Wall time after which a child that has not used its CPU budget is the machinery's stall."""
FORBIDDEN = frozenset(
    {
        "__import__",
        "open",
        "exec",
        "eval",
        "compile",
        "getattr",
        "setattr",
        "delattr",
        "globals",
        "locals",
        "vars",
        "breakpoint",
        "input",
        "exit",
        "quit",
        "help",
        "memoryview",
        "type",
        "object",
        "super",
        "classmethod",
        "staticmethod",
        "property",
        "print",
    }
)


IMPORTABLE = frozenset({"sympy", "math"})
"""Modules evaluated code may import from (graders' own parsers do)."""
_COMPILE = builtins.compile  # the real one: ast.parse calls compile, which gets guarded


@dataclass(frozen=True, slots=True)
class Graded:
    """What the grader did with the answer: its value, or why the answer scored nothing."""

    value: float | None
    refused: str = ""
    """Non-empty when the answer scored 0 because grading it failed (the agent's doing)."""
    raised: bool = False
    """The grader raised on the answer (a grader should score any text, not fail on it)."""


def check_source(source: Any) -> None:
    """Refuse code an ``eval``/``exec`` of the agent's text must not run: attribute access,
    dunder names, the builtins that reach outside an expression."""
    tree = (
        source
        if isinstance(source, ast.AST)
        else _COMPILE(source, "<answer>", "exec", ast.PyCF_ONLY_AST)
    )
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            raise ValueError(f"attribute access ({node.attr}) in an evaluated answer")
        if isinstance(node, ast.Name) and (node.id.startswith("_") or node.id in FORBIDDEN):
            raise ValueError(f"the name {node.id} in an evaluated answer")
        if isinstance(node, ast.ImportFrom) and node.module in IMPORTABLE and not node.level:
            continue  # sympy's parse_expr runs `from sympy import *` itself
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.Lambda, ast.Global)):
            raise ValueError(f"{type(node).__name__} in an evaluated answer")


def _guarded(real: Callable[..., Any]) -> Callable[..., Any]:
    """``real`` (``eval``, ``exec``, ``compile``) checking source text and syntax trees first;
    a code object passes (made by a guarded ``compile``, or by the grader's own code)."""

    def guarded(source: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(source, (str, bytes, ast.AST)):
            check_source(source.decode() if isinstance(source, bytes) else source)
        return real(source, *args, **kwargs)

    return guarded


def _jail() -> None:
    """In the child: no file writes, bounded CPU and memory, guarded ``eval``/``exec``."""
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_S, CPU_S + 1))
    with open("/proc/self/statm") as f:
        mapped = int(f.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (mapped + MEMORY_BYTES, mapped + MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write fails with EFBIG instead
    builtins.eval = _guarded(builtins.eval)
    builtins.exec = _guarded(builtins.exec)
    builtins.compile = _guarded(builtins.compile)


def _child(fn: Callable[..., Any], args: tuple[Any, ...], w: int) -> None:
    try:
        _jail()
        try:
            msg: tuple[str, Any] = ("ok", float(fn(*args)))
        except MemoryError:
            msg = ("refused", "grading the answer ran out of memory")
        except BaseException as e:  # the answer made the grader fail: the agent's
            msg = ("raised", f"the grader raised {type(e).__name__}: {str(e)[:300]}")
        data = json.dumps(msg).encode()
        while data:
            data = data[os.write(w, data) :]
    finally:
        os._exit(0)


def _read_all(r: int, pid: int) -> tuple[bytes, int, bool]:
    """The child's message, its wait status, and whether it stalled (wall time passed)."""
    chunks, deadline = [], time.monotonic() + WALL_S
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([r], [], [], left)[0]:
            os.kill(pid, signal.SIGKILL)
            return b"".join(chunks), os.waitpid(pid, 0)[1], True
        chunk = os.read(r, 1 << 16)
        if not chunk:
            return b"".join(chunks), os.waitpid(pid, 0)[1], False
        chunks.append(chunk)


def grade_isolated(fn: Callable[..., Any], *args: Any) -> Graded:
    """``fn(*args)`` (a grader on the agent's answer) in a jailed, forked child."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child leaves by os._exit
        os.close(r)
        _child(fn, args, w)
    os.close(w)
    try:
        data, status, stalled = _read_all(r, pid)
    finally:
        os.close(r)
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL)
    if killed and not stalled:
        return Graded(None, f"grading the answer used more than {CPU_S}s of CPU")
    if stalled:
        raise GraderFailed(f"the grader stalled for {WALL_S:g}s without using its CPU")
    try:  # JSON, never pickle: the child ran code the agent's answer chose
        kind, value = json.loads(data)
    except ValueError:
        raise GraderFailed(
            f"the grader's process died (wait status {status}) and said nothing"
        ) from None
    if kind == "ok" and isinstance(value, float):
        return Graded(value)
    return Graded(None, str(value)[:400], raised=kind == "raised")
