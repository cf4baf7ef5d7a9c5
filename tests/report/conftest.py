"""Headless Chromium (Debian's ``chromium``) driven by playwright, without downloading a browser."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _chromium() -> str | None:
    path = os.environ.get("ENVLAB_CHROMIUM") or shutil.which("chromium")
    return path or (None if not os.path.exists("/usr/bin/chromium") else "/usr/bin/chromium")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium. Missing browser or playwright: skipped locally, a failure in CI.

    Module-scoped: playwright's sync API marks an event loop as running in this thread while it
    is open, which would break the asyncio tests of later modules."""
    exe = _chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        exe = None
    if exe is None:
        message = (
            "headless Chromium is needed: `apt-get install chromium` and "
            "`pip install playwright` (no `playwright install`: the system browser is used)"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_FLAGS)
        yield b
        b.close()
