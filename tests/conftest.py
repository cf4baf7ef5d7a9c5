from __future__ import annotations

import os
import sys
from pathlib import Path

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
