"""Agents (model + harness + settings), found by name through the ``envlab.agents`` group.

A name is either a registered agent (``oracle``), a registered kind with an argument
(``shell:solve.sh``, ``openai:MODEL@URL``: the factory receives the text after the first colon
as its first argument), or an import path (``mypkg.agents:make_agent``).

What a name points at is an ``Agent`` class (``NoopAgent``: the run gets
``AgentClass(cls, **kwargs)``, a fresh instance per episode), a function returning an
``AgentFactory`` (``openai``, ``smollm2``), or a function returning an ``Agent`` (called once
per episode). ``load_agent`` always returns an ``AgentFactory``; the caller closes it
(``await factory.aclose()``) when the run ends.
"""

from __future__ import annotations

from typing import Any

from envlab.core import Agent, AgentClass, AgentFactory, ConfigError, EnvlabError
from envlab.core.registry import Registry

AGENTS = Registry("envlab.agents", "agent")


def load_agent(name: str, **kwargs: Any) -> AgentFactory:
    """The factory of the agent called ``name`` (registered name, ``kind:argument``, or
    ``module:factory`` path), with ``kwargs`` for it. Bad arguments are a ``ConfigError`` now,
    not in the first episode: the factory's spec is built here."""
    args: tuple[Any, ...] = ()
    kind, sep, rest = name.partition(":")
    if sep and kind in AGENTS.names():
        target = AGENTS.resolve(kind)
        args = (rest,)
    else:
        target = AGENTS.resolve(name)
    try:
        factory = _factory(name, target, args, kwargs)
        factory.spec  # noqa: B018 - builds (and so checks) the agent's settings now
    except EnvlabError:
        raise
    except TypeError as e:
        raise ConfigError(f"cannot build agent {name!r} with arguments {kwargs}: {e}") from e
    except ValueError as e:
        raise ConfigError(f"bad agent {name!r}: {e}") from e
    return factory


def _factory(name: str, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> AgentFactory:
    if isinstance(target, type) and issubclass(target, Agent):
        return AgentClass(target, *args, **kwargs)
    if isinstance(target, AgentFactory):
        if args or kwargs:
            raise ConfigError(f"agent {name!r} is a ready factory; it takes no arguments")
        return target
    if not callable(target):
        raise ConfigError(
            f"{name!r} is a {type(target).__name__}, not an Agent class or a function making "
            "an AgentFactory"
        )
    made = target(*args, **kwargs)
    if isinstance(made, AgentFactory):
        return made
    if isinstance(made, Agent):  # a function making one agent: called once per episode
        return AgentClass(target, *args, **kwargs)
    raise ConfigError(
        f"{name!r} produced a {type(made).__name__}, not an envlab AgentFactory or Agent"
    )


__all__ = ["AGENTS", "load_agent"]
