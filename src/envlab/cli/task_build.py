"""``envlab task build PATH``: build task folders' images (and their verifiers' caches) now.

Each layer is shown as it is found in the cache or built, with its time; a second build of an
unchanged task finds every layer and runs nothing. A task that runs in the host-filesystem
mode says why. ``--json`` prints one object per task.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from envlab.cli import options as O
from envlab.cli.console import out, run_async

if TYPE_CHECKING:
    from envlab.cli.task_build_rows import BuildRow


def build_cmd(
    path: Annotated[Path, typer.Argument(metavar="PATH", help="A task folder or a directory.")],
    as_json: O.JsonOption = False,
) -> None:
    """Build the images of task folders (cached layers; the base root filesystems once)."""
    from envlab.cli.task_build_rows import build_one
    from envlab.envs.taskfolder import find_task_folders
    from envlab.envs.taskfolder.spec import default_images

    async def go() -> list[BuildRow]:
        return [await build_one(f, default_images(), as_json) for f in find_task_folders(path)]

    rows = run_async(go())
    if as_json:
        typer.echo(json.dumps([r.model_dump(mode="json") for r in rows], indent=2))
    else:
        _print(rows)
    if any(r.error for r in rows):
        raise typer.Exit(1)


def _print(rows: list[BuildRow]) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="envlab task build")
    for col in ("task", "mode", "layers", "built now", "seconds", "notes / error"):
        table.add_column(col)
    for r in rows:
        text = r.error or "\n".join(r.notes) or (r.reason or "")
        table.add_row(r.task, r.mode, str(r.layers), str(r.built), f"{r.seconds:.2f}",
                      escape(text[-600:]))  # fmt: skip
    out().print(table)
