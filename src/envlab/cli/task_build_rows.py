"""What ``envlab task build`` does for one task folder, and the row it reports (imported only
when the command runs: ``envlab --help`` loads neither pydantic nor the builders)."""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, Field

from envlab.cli.console import err


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
    """Prepare one task's runtime as an episode would (its image's layers built or found,
    with progress; or its host workspace), and report how."""
    from envlab.core.errors import EnvlabError
    from envlab.sandbox.tasks.runtime import prepare_runtime

    t0 = time.monotonic()
    row = BuildRow(task=folder.name, mode="image")

    def progress(what: str, cached: bool, seconds: float) -> None:
        row.layers += what.startswith(f"{folder.name}/")
        row.built += not cached and what.startswith(f"{folder.name}/")
        if not quiet:
            mark = "[dim]cached[/dim]" if cached else f"[green]built[/green] {seconds:6.1f}s"
            err().print(f"  {mark} {what}", highlight=False)

    try:
        with err().status(f"building {folder.name}"):
            runtime = await prepare_runtime(folder, images=images, progress=progress)
        row.mode = runtime.mode
        row.reason = runtime.state().get("host_mode_because")
        row.notes = [n for n in runtime.notes if not n.startswith("mode: ")]
    except EnvlabError as e:
        row.error = str(e)
    row.seconds = round(time.monotonic() - t0, 3)
    return row
