"""``envlab task build PATH``: build task folders' images (and their verifiers' caches) now.

Each layer is shown as it is found in the cache or built, with its time; a second build of an
unchanged task finds every layer and runs nothing. A task that runs in the host-filesystem
mode says why. ``--json`` prints one object per task.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel, Field

from envlab.cli.console import err, out, run_async


class BuildRow(BaseModel):
    task: str
    mode: str
    """``image``, or ``host`` (with ``reason``)."""
    reason: str | None = None
    layers: int = 0
    built: int = 0
    """Layers built now (the others came from the cache)."""
    seconds: float = 0.0
    notes: list[str] = Field(default_factory=list)
    error: str | None = None


async def build_one(folder: Any, images: str, quiet: bool) -> BuildRow:
    from envlab.core.errors import EnvlabError
    from envlab.envs.taskfolder.image_build import build_image
    from envlab.envs.taskfolder.image_mode import compose_notes, host_mode_reason
    from envlab.envs.taskfolder.image_verifier import prepare_verifier

    t0 = time.monotonic()
    reason = host_mode_reason(folder, images)
    if reason is not None:
        return BuildRow(task=folder.name, mode="host", reason=reason)
    row = BuildRow(task=folder.name, mode="image")

    def progress(what: str, cached: bool, seconds: float) -> None:
        row.layers += what.startswith(f"{folder.name}/")
        row.built += not cached and what.startswith(f"{folder.name}/")
        if not quiet:
            mark = "[dim]cached[/dim]" if cached else f"[green]built[/green] {seconds:6.1f}s"
            err().print(f"  {mark} {what}", highlight=False)

    try:
        row.notes = compose_notes(folder)
        with err().status(f"building {folder.name}"):
            image = await build_image(folder, progress=progress)
            await prepare_verifier(folder, image)
        row.notes += image.notes
    except EnvlabError as e:
        row.error = str(e)
    row.seconds = round(time.monotonic() - t0, 3)
    return row


def build_cmd(
    path: Annotated[Path, typer.Argument(metavar="PATH", help="A task folder or a directory.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Build the images of task folders (cached layers; the base root filesystems once)."""
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
