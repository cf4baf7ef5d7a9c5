"""``envlab gc``: remove what dead envlab processes left behind (sandbox/gc.py).

Workspaces under the state directory, their mounted filesystems and loop devices, cgroups and
owner locks of processes that are gone. A live process's sandboxes are never touched.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from envlab.cli import options as O
from envlab.cli.console import out


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def gc_cmd(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", "-n", help="List what would be removed; remove nothing.")
    ] = False,
    legacy: Annotated[
        bool,
        typer.Option(
            "--legacy",
            help="Also what envlab left before it named things by owner (workspaces directly "
            "in <state>/boxes, empty envlab cgroups, processes of unleased sandbox uids). "
            "Only when no older envlab is running.",
        ),
    ] = False,
    as_json: O.JsonOption = False,
) -> None:
    """Remove the sandboxes, filesystems and cgroups of envlab processes that have died."""
    from rich.table import Table

    from envlab.sandbox.gc import collect

    rows = collect(dry_run=dry_run, legacy=legacy)
    if as_json:
        typer.echo(json.dumps([r.to_dict() for r in rows], indent=2))
        return
    verb = "would remove" if dry_run else "removed"
    table = Table(title=f"envlab gc: {verb} {len(rows)}")
    for col in ("kind", "path", "owner", "size", "detail"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(r.kind, r.path, r.owner or "-", _size(r.bytes) if r.bytes else "", r.detail)
    out().print(table)
    freed = sum(r.bytes for r in rows)
    if rows:
        out().print(f"{verb} {len(rows)} items, {_size(freed)} of workspaces")
    else:
        out().print("nothing stale: every envlab sandbox on this host belongs to a live process")
