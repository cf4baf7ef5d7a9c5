"""Backends by name, one ``exec`` for all, and nothing blocking on the event loop."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from envlab.core import ConfigError
from envlab.sandbox import (
    BACKENDS,
    BubblewrapSandbox,
    LocalSandbox,
    Mount,
    Sandbox,
    SandboxError,
    backend,
)
from tests.sandbox.conftest import SMALL, requires_bwrap


def test_backends_by_name() -> None:
    assert backend("bwrap") is BubblewrapSandbox and backend("local") is LocalSandbox
    assert backend("bwrap").isolated and not backend("local").isolated
    with pytest.raises(ConfigError, match="unknown sandbox backend 'docker'"):
        backend("docker")


@pytest.mark.parametrize("method", ["exec", "exec_bytes", "read_file", "upload"])
def test_one_exec_for_every_backend(method: str) -> None:
    """Each backend implements ``_run`` only; ``exec`` and the helpers are the base's."""
    for cls in BACKENDS.values():
        assert method not in vars(cls), f"{cls.__name__} overrides {method}"
        assert "_run" in vars(cls)
    common = inspect.signature(Sandbox.create).parameters
    for cls in BACKENDS.values():
        params = inspect.signature(cls.create).parameters
        assert list(params)[: len(common)] == list(common)


class Heartbeat:
    """A task that ticks on the event loop while it is free, and a way for a worker thread to
    wait until it has ticked (a thread on the loop would wait in vain: no tick comes)."""

    def __init__(self) -> None:
        self.ticks = 0
        self._beat = threading.Event()

    async def run(self) -> None:
        while True:
            self.ticks += 1
            self._beat.set()
            await asyncio.sleep(0.001)

    def ticks_while(self, seconds: float = 10.0) -> int:
        """Called in the blocking code: how many ticks the loop made meanwhile."""
        start = self.ticks
        self._beat.clear()
        self._beat.wait(seconds)
        return self.ticks - start


@asynccontextmanager
async def heartbeat() -> AsyncIterator[Heartbeat]:
    beat = Heartbeat()
    task = asyncio.create_task(beat.run())
    await asyncio.sleep(0)
    try:
        yield beat
    finally:
        task.cancel()


class WatchedBwrap(BubblewrapSandbox):
    """The real sandbox; its ``prepare`` also counts the loop's ticks while it runs."""

    beat: Heartbeat
    ticks_during_prepare = -1

    def prepare(self, template: Path | None = None) -> None:
        type(self).ticks_during_prepare = self.beat.ticks_while()
        super().prepare(template)


class WatchedLocal(LocalSandbox):
    beat: Heartbeat
    ticks_during_init = -1

    def __init__(self, **kwargs: Any) -> None:
        type(self).ticks_during_init = self.beat.ticks_while()
        super().__init__(**kwargs)


@requires_bwrap
async def test_prepare_runs_off_the_event_loop(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("x")
    async with heartbeat() as beat:
        WatchedBwrap.beat = beat
        for template in (None, tmp_path):
            WatchedBwrap.ticks_during_prepare = -1
            box = await WatchedBwrap.create(template, limits=SMALL)
            try:
                assert WatchedBwrap.ticks_during_prepare > 0, "prepare() blocked the loop"
                assert (await box.exec("ls")).ok
            finally:
                await box.close()


async def test_local_setup_runs_off_the_event_loop(tmp_path: Path) -> None:
    async with heartbeat() as beat:
        WatchedLocal.beat = beat
        with pytest.warns(RuntimeWarning, match="NO ISOLATION"):
            box = await WatchedLocal.create(tmp_path)
        await box.close()
    assert WatchedLocal.ticks_during_init > 0


async def test_local_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    with pytest.warns(RuntimeWarning):
        box = await LocalSandbox.create()
    try:
        with pytest.raises(ConfigError, match="no mount namespace"):
            await box.exec("true", mounts=[Mount(tmp_path, "/data")])
        assert (await box.exec("true")).ok
        await box.kill_all()
        with pytest.raises(SandboxError, match="stopped"):
            await box.exec("true")
    finally:
        await box.close()
    with pytest.raises(ConfigError, match="no mount namespace"):
        await LocalSandbox.create(mounts=[Mount(tmp_path, "/data")])
