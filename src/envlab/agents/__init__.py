"""Agents (model + harness + settings), found by name through the ``envlab.agents`` group.

A name is either a registered agent (``oracle``), a registered kind with an argument
(``shell:solve.sh``, ``openai:MODEL@URL``: the factory receives the text after the first colon
as its first argument), or an import path (``mypkg.agents:make_agent``).
"""

from __future__ import annotations

from typing import Any

from envlab.core import Agent, ConfigError
from envlab.core.registry import Registry

AGENTS = Registry("envlab.agents", "agent")


def load_agent(name: str, **kwargs: Any) -> Agent:
    """An agent by registered name, ``kind:argument``, or ``module:factory`` path."""
    args: tuple[Any, ...] = ()
    kind, sep, rest = name.partition(":")
    if sep and kind in AGENTS.names():
        factory = AGENTS.resolve(kind)
        args = (rest,)
    else:
        factory = AGENTS.resolve(name)
    try:
        agent = factory(*args, **kwargs)
    except TypeError as e:
        raise ConfigError(f"cannot build agent {name!r} with arguments {kwargs}: {e}") from e
    except ValueError as e:
        raise ConfigError(f"bad agent {name!r}: {e}") from e
    if not isinstance(agent, Agent):
        raise ConfigError(f"{name!r} produced a {type(agent).__name__}, not an envlab Agent")
    return agent


__all__ = ["AGENTS", "load_agent"]
