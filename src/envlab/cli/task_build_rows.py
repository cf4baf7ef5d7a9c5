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
    from envlab.core.errors import EnvlabError
    from envlab.sandbox.tasks.image import compose_notes, host_mode_reason
    from envlab.sandbox.tasks.image_build import build_image
    from envlab.sandbox.tasks.image_verifier import prepare_verifier

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
