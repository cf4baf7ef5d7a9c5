from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest

from envlab.core import ConfigError
from envlab.sandbox import BubblewrapSandbox, Limits, MiB
from envlab.sandbox.layout import bwrap_binary


def _bwrap_available() -> bool:
    try:
        bwrap_binary()
    except ConfigError:
        return False
    return True


requires_bwrap = pytest.mark.skipif(not _bwrap_available(), reason="no bubblewrap binary")
requires_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="a uid per sandbox (and RLIMIT_NPROC per sandbox) needs root"
)

SMALL = Limits(
    timeout_s=20,
    cpu_seconds=30,
    address_space_bytes=1024 * MiB,
    max_processes=64,
    max_file_bytes=64 * MiB,
    output_bytes=256 * 1024,
)


@pytest.fixture
async def box() -> AsyncIterator[BubblewrapSandbox]:
    sandbox = await BubblewrapSandbox.create(limits=SMALL, name="test")
    try:
        yield sandbox
    finally:
        await sandbox.close()
