"""``import envlab.measure`` loads neither the engine nor rich; numpy and scipy only when needed."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import subprocess_env


def _modules_after(code: str) -> list[str]:
    code += "\nimport json, sys; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], env=subprocess_env(), capture_output=True,
                         text=True, timeout=120, check=True)  # fmt: skip
    return json.loads(out.stdout.splitlines()[-1])


def _loaded(modules: list[str], *names: str) -> list[str]:
    return [m for m in modules if m in names or m.startswith(tuple(n + "." for n in names))]


def test_measure_imports_no_engine_no_rich_no_numpy_no_scipy() -> None:
    modules = _modules_after("import envlab.measure")
    assert "envlab.measure" in modules and "envlab.runs" in modules
    assert _loaded(modules, "envlab.rollout", "rich", "numpy", "scipy") == []


def test_numpy_and_scipy_are_imported_by_the_functions_that_need_them() -> None:
    modules = _modules_after("from envlab.measure import mean_ci\nmean_ci([0.0, 1.0, 1.0])")
    assert "numpy" in modules and "scipy.stats" in modules  # loaded on use, in this process


def test_envlab_help_imports_no_scipy() -> None:
    code = (
        "import sys\nsys.argv = ['envlab', '--help']\nfrom envlab.cli.main import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass"
    )
    assert _loaded(_modules_after(code), "scipy") == []
