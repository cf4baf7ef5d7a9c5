"""``import envlab.measure`` loads neither the engine nor rich, and scipy only when needed."""

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


def test_measure_imports_no_engine_no_rich_no_scipy() -> None:
    modules = _modules_after("import envlab.measure")
    assert "envlab.measure" in modules and "envlab.runs" in modules
    assert _loaded(modules, "envlab.rollout", "rich", "scipy") == []


def test_scipy_is_imported_by_the_functions_that_need_it() -> None:
    modules = _modules_after(
        "from envlab.measure import proportion_ci\nproportion_ci(3, 10, method='exact')"
    )
    assert "scipy.stats" in modules  # the laziness is real: the same process loads it on use


def test_envlab_help_imports_no_scipy() -> None:
    code = (
        "import sys\nsys.argv = ['envlab', '--help']\nfrom envlab.cli.main import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass"
    )
    assert _loaded(_modules_after(code), "scipy") == []
