"""Agents (model + harness + settings), found by name through the ``envlab.agents`` group."""

from __future__ import annotations

from typing import Any

from envlab.core import Agent, ConfigError
from envlab.core.registry import Registry

AGENTS = Registry("envlab.agents", "agent")


def load_agent(name: str, **kwargs: Any) -> Agent:
    """An agent by registered name or ``module:factory`` path."""
    factory = AGENTS.resolve(name)
    try:
        agent = factory(**kwargs)
    except TypeError as e:
        raise ConfigError(f"cannot build agent {name!r} with arguments {kwargs}: {e}") from e
    if not isinstance(agent, Agent):
        raise ConfigError(f"{name!r} produced a {type(agent).__name__}, not an envlab Agent")
    return agent


__all__ = ["AGENTS", "load_agent"]
