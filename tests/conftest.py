from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the suite's task folders are written for the host-filesystem mode; the image tests ask for
# images = "auto" themselves (tests/envs/taskfolder/test_image_*.py)
os.environ.setdefault("ENVLAB_IMAGES", "off")
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    # a worker shares the cores with the others: its torch/llama.cpp engines and their child
    # processes take their share of threads, not every core (OpenMP threads that spin for a core
    # another worker holds: measured beside one busy core, the torch engine's tests took 70 s
    # with 2 threads, 54 s with 1)
    _share = len(os.sched_getaffinity(0)) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _share)))
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.scheduling import make_scheduler, rank  # noqa: E402


def subprocess_env() -> dict[str, str]:
    """Environment for a child ``envlab`` process that can import ``tests.support``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["COLUMNS"] = "200"
    return env


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest xdist groups first (a stable sort: the rest keep their order)."""
    items.sort(key=lambda item: rank(item.nodeid))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` deals ``tests.support.scheduling``'s groups."""
    return make_scheduler(config, log) if config.getvalue("dist") == "loadgroup" else None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per CPU this process may use, at most 4 (each worker holds its
    own models and image bases; more workers than cores only add their start-up)."""
    return max(1, min(4, len(os.sched_getaffinity(0))))
