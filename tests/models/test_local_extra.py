"""Without a local engine (the extra envlab[local], or torch's packages), the embedded model is a
ConfigError that names the installs; without llama.cpp alone, it runs on torch.

Each check runs in a fresh interpreter where the extra's modules cannot be imported (``None`` in
``sys.modules`` is how the import system blocks a module), through the real CLI and imports.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.models.conftest import installed

BLOCK = "import sys\nfor m in {mods!r}:\n    sys.modules[m] = None\n"
LOCAL = ("llama_cpp", "fastapi", "uvicorn")


def _run(code: str, mods: tuple[str, ...] = LOCAL) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCK.format(mods=mods) + code],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_serve_model_without_extra_exits_2_naming_the_install() -> None:
    proc = _run("sys.argv = ['envlab', 'serve-model']\nfrom envlab.cli.main import main\nmain()\n")
    assert proc.returncode == 2, proc.stderr
    assert "envlab[local]" in proc.stderr
    assert "pip install" in proc.stderr


def test_server_module_import_is_a_config_error() -> None:
    proc = _run(
        "from envlab.core import ConfigError\n"
        "try:\n    import envlab.models.server\n"
        "except ConfigError as e:\n    print('CONFIG', e)\n",
        ("fastapi",),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("CONFIG") and "envlab[local]" in proc.stdout


def test_engine_without_llama_cpp_is_a_config_error() -> None:
    proc = _run(
        "from envlab.core import ConfigError\n"
        "from envlab.models.llamacpp import LlamaCppEngine\n"
        "try:\n    LlamaCppEngine('model.gguf')\n"
        "except ConfigError as e:\n    print('CONFIG', e)\n",
        ("llama_cpp",),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("CONFIG") and "llama-cpp-python" in proc.stdout


def test_remote_model_agent_needs_no_extra() -> None:
    proc = _run(
        "from envlab.agents.model_agents import openai\n"
        "from envlab.models.client import OpenAICompatModel\n"
        "import envlab.cli.main\nprint('OK')\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("OK")


def test_smollm2_agent_without_extra_fails_before_any_episode() -> None:
    """Needs ``require_local`` in ``model_agents.smollm2`` (else every episode is agent_error)."""
    proc = _run(
        "from envlab.core import ConfigError\n"
        "from envlab.agents.model_agents import smollm2\n"
        "try:\n    smollm2()\n"
        "except ConfigError as e:\n    print('CONFIG', e)\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("CONFIG") and "envlab[local]" in proc.stdout


@pytest.mark.skipif(not installed("torch"), reason="the torch engine is missing")
def test_without_llama_cpp_the_smollm2_agent_runs_on_torch() -> None:
    proc = _run(
        "import os\nos.environ.pop('ENVLAB_ENGINE', None)\n"
        "from envlab.agents.model_agents import smollm2\n"
        "print('ENDPOINT', smollm2().spec.endpoint)\n",
        ("llama_cpp",),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("(torch engine)")


def test_without_any_engine_the_error_names_both_installs() -> None:
    proc = _run(
        "import os\nos.environ.pop('ENVLAB_ENGINE', None)\n"
        "from envlab.core import ConfigError\n"
        "from envlab.agents.model_agents import smollm2\n"
        "try:\n    smollm2()\n"
        "except ConfigError as e:\n    print('CONFIG', e)\n",
        ("llama_cpp", "torch", "transformers"),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("CONFIG") and "envlab[local]" in proc.stdout
    assert "pip install 'envlab[embedded]'" in proc.stdout


def test_a_chosen_engine_that_is_missing_is_named() -> None:
    proc = _run(
        "import os\nos.environ['ENVLAB_ENGINE'] = 'torch'\n"
        "from envlab.core import ConfigError\n"
        "from envlab.agents.model_agents import smollm2\n"
        "try:\n    smollm2()\n"
        "except ConfigError as e:\n    print('CONFIG', e)\n",
        ("torch",),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("CONFIG") and "missing: torch" in proc.stdout


def test_engine_threads_follow_omp_num_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Processes that share the cores (test workers, several servers) set OMP_NUM_THREADS; an
    unset or malformed value means every core this process may use."""
    import os

    from envlab.models.engine import _threads

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert _threads() == 1
    for value in ("", "0", "two"):
        monkeypatch.setenv("OMP_NUM_THREADS", value)
        assert _threads() == len(os.sched_getaffinity(0))
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert _threads() == len(os.sched_getaffinity(0))
