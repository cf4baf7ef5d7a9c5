"""What the paired overhead benches load from a checkout: its ``bench/overhead.py`` (the hand
loop), the ``arith`` spec and the oracle agent, in that checkout's API."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any


def load(checkout: Path) -> tuple[ModuleType, Any, Any]:
    """``(overhead module, ArithEnv(), oracle agent)`` of ``checkout`` (on ``PYTHONPATH``)."""
    spec = importlib.util.spec_from_file_location("overhead", checkout / "bench" / "overhead.py")
    assert spec is not None and spec.loader is not None
    overhead = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(overhead)
    from envlab.agents.scripted import OracleAgent
    from envlab.envs.arith import ArithEnv

    try:  # the agent factory of the current contract; a bare agent before it
        from envlab.core import AgentClass

        agent: Any = AgentClass(OracleAgent)
    except ImportError:
        agent = OracleAgent()
    return overhead, ArithEnv(), agent
