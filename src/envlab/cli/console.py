"""The CLI's runtime: two consoles made on first use (`envlab --help` never loads rich), running a
command's coroutine, and turning an ``EnvlabError`` into one line on stderr."""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Coroutine
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import typer
    from rich.console import Console


T = TypeVar("T")


@cache
def out() -> Console:
    """Standard output: tables and results."""
    from rich.console import Console

    return Console()


@cache
def err() -> Console:
    """Standard error: progress, notes, warnings and errors."""
    from rich.console import Console

    return Console(stderr=True)


class LazyRichHandler(logging.Handler):
    """A logging handler that draws with rich, imported on the first record."""

    def __init__(self, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self._inner: logging.Handler | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self._inner is None:
            from rich.logging import RichHandler

            self._inner = RichHandler(console=err(), show_time=False, show_path=False)
        self._inner.emit(record)


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)`` (asyncio imported when a command runs, not for ``--help``)."""
    import asyncio

    return asyncio.run(coro)


def _warning_line(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: object = None,
    line: str | None = None,
) -> None:
    """A Python warning as one line on stderr (``warning: ...``), not its source line."""
    from rich.markup import escape

    err().print(f"[yellow]warning:[/] {escape(str(message))}", soft_wrap=True)


def run_app(typer_app: typer.Typer) -> None:
    """Run ``typer_app``: an ``EnvlabError`` is one line on stderr (exit 2), never a traceback;
    a Python warning is one line too."""
    warnings.showwarning = _warning_line
    logging.basicConfig(level=logging.WARNING, format="%(message)s", handlers=[LazyRichHandler()])
    # what is built before the episodes start (bases, image layers) is progress users see
    logging.getLogger("envlab.prepare").setLevel(logging.INFO)
    try:
        typer_app()
    except Exception as e:
        from envlab.core.errors import EnvlabError

        if not isinstance(e, EnvlabError):
            raise
        from rich.markup import escape

        # one line, unwrapped: the terminal wraps it, and its words stay searchable
        err().print(f"[bold red]error:[/] {escape(str(e))}", soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err().print(
            "[yellow]interrupted:[/] recorded episodes are kept; rerun with --resume to finish."
        )
        sys.exit(130)
