"""``envlab.runs`` sits right above core: importing it loads nothing else of envlab."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import subprocess_env


def test_runs_imports_only_core() -> None:
    code = "import json, sys, envlab.runs; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], env=subprocess_env(), capture_output=True,
                         text=True, timeout=120, check=True)  # fmt: skip
    ours = [m for m in json.loads(out.stdout) if m.startswith("envlab.")]
    assert ours and all(m.startswith(("envlab.core", "envlab.runs")) for m in ours), ours
