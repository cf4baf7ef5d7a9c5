"""The embedded model on every local engine that is installed (llama.cpp, torch).

``engine`` is parametrized over ``ENGINES``: a test that takes it runs once per backend, and a
backend whose packages are missing is skipped, not failed. Each backend's model is loaded once
per test session (``shared_engine``: the in-process agent's key, so both use one model).
"""

from __future__ import annotations

import importlib.util

import pytest

from envlab.models.engine import Engine
from envlab.models.local import BACKENDS, shared_engine
from envlab.models.weights import SMOLLM2_MODEL_ID, smollm2_path


def installed(backend: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in BACKENDS[backend])


ENGINES = [
    pytest.param(
        b, id=b, marks=pytest.mark.skipif(not installed(b), reason=f"the {b} engine is missing")
    )
    for b in BACKENDS
]


@pytest.fixture(scope="session", params=ENGINES)
def engine(request: pytest.FixtureRequest) -> Engine:
    return shared_engine(smollm2_path(), backend=request.param, model_id=SMOLLM2_MODEL_ID)
