from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from envlab.runs import RunDir
from tests.export.runs import PLAN, build_tokenizer, trajectory, write_run

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing from a hub: every model is built here
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers", reason="the export tests need the extra envlab[train]")
    path = tmp_path_factory.mktemp("tokenizer")
    build_tokenizer(path)
    return path


@pytest.fixture(scope="session")
def tok(tokenizer_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)


@pytest.fixture
def run(tmp_path: Path, tok: Any) -> RunDir:
    """The run of ``PLAN``: four groups, infra and env errors among them."""
    return RunDir(write_run(tmp_path / "run", [trajectory(tok, ep) for ep in PLAN]))
