"""The verifier's events channel: read by the event loop on readiness, never by a polling thread
(whose join made every grade block the loop until the thread's next poll), and never a reason
for the verifier's writers to block."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

from envlab.sandbox.tasks.verifier import _EVENTS_LIMIT, EventsChannel


async def test_lines_written_are_read_by_the_loop_without_a_thread(tmp_path: Path) -> None:
    threads = threading.active_count()
    channel = EventsChannel(tmp_path / "events")
    assert threading.active_count() == threads
    fd = os.open(tmp_path / "events", os.O_WRONLY)
    try:
        os.write(fd, b"start 12\n")
        for _ in range(3):  # the loop runs its reader
            await asyncio.sleep(0)
        os.write(fd, b"finish 12 0\n")
    finally:
        os.close(fd)
    assert channel.close() == "start 12\nfinish 12 0\n"


async def test_a_flood_past_the_limit_never_blocks_the_writer(tmp_path: Path) -> None:
    """Code under test that floods the FIFO: its writes all complete (the loop drops what is
    past the limit), and what was kept stops at the limit."""
    channel = EventsChannel(tmp_path / "events")
    flood = b"x" * (3 * _EVENTS_LIMIT)

    def write() -> None:
        fd = os.open(tmp_path / "events", os.O_WRONLY)  # a blocking writer, as a verifier's
        try:
            view = memoryview(flood)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)

    await asyncio.to_thread(write)  # returns only if the loop kept draining meanwhile
    text = channel.close()
    assert _EVENTS_LIMIT <= len(text) <= _EVENTS_LIMIT + 65536


async def test_a_writer_that_never_stops_does_not_hold_the_loop(tmp_path: Path) -> None:
    """Code under test that floods the FIFO without end: the loop still runs everything else
    (the verifier's timeout among it) between its reads."""
    import subprocess

    channel = EventsChannel(tmp_path / "events")
    flood = subprocess.Popen(["sh", "-c", f"cat /dev/zero > {tmp_path / 'events'}"])
    try:
        for _ in range(200):  # each needs the loop back from the reader
            await asyncio.sleep(0)
    finally:
        flood.kill()
        flood.wait()
    assert len(channel.close()) <= _EVENTS_LIMIT + 65536
