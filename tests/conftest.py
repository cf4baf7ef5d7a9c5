from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the suite's task folders are written for the host-filesystem mode; the image tests ask for
# images = "auto" themselves (tests/envs/taskfolder/test_image_*.py)
os.environ.setdefault("ENVLAB_IMAGES", "off")
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def subprocess_env() -> dict[str, str]:
    """Environment for a child ``envlab`` process that can import ``tests.support``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["COLUMNS"] = "200"
    return env


LONG_FILES = (
    # one vet run of ~1,100 episodes serves the whole module (7 minutes under load)
    "tests/vet/test_gallery.py",
    "tests/envs/taskfolder/test_separate_redteam.py",
    "tests/envs/taskfolder/test_image_redteam.py",
    "tests/envs/taskfolder/test_grading_attacks.py",
    "tests/envs/taskfolder/test_pytest_guard_patch_image.py",
    "tests/envs/taskfolder/test_reward_validity.py",
    "tests/envs/tau/test_tau_env.py",
)
"""The suite's longest files. pytest-xdist (``-n 4 --dist loadfile``, pyproject's addopts) deals
files to its workers in collection order: these go first, so that none of them starts last and
runs alone while the other workers sit idle."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def first(item: pytest.Item) -> int:
        path = Path(str(item.fspath)).resolve().relative_to(ROOT).as_posix()
        return LONG_FILES.index(path) if path in LONG_FILES else len(LONG_FILES)

    items.sort(key=first)  # stable: the rest keep their order
