"""Environments, found by name through the ``envlab.envs`` entry-point group."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from envlab.core import ConfigError, EnvSpec
from envlab.core.registry import Registry

ENVS = Registry("envlab.envs", "environment")


def load_env(name: str, **kwargs: Any) -> EnvSpec:
    """The spec of an environment by registered name, ``module:Spec`` path, or the path of a
    task folder (or of a directory of task folders), or a replay directory (``replay.json``,
    written by ``envlab sim-from-logs``), or a ``ws://``/``wss://`` URL of a server speaking
    OpenEnv's protocol (``RemoteEnv``, docs/remote.md), or ``PREFIX:ITEM`` of an adapter's
    family (``rg:leg_counting``: ``family_factory``), configured with ``kwargs``."""
    if name.startswith(("ws://", "wss://")):  # a remote environment, before the path check
        from envlab.envs.remote import load_remote_env

        return load_remote_env(name, **kwargs)
    is_python_file = name.partition(":")[0].endswith(".py")
    if not is_python_file and ("/" in name or name.startswith(".") or Path(name).is_dir()):
        path = Path(name)
        if not path.exists():
            raise ConfigError(
                f"no task folder at {name!r}: the path does not exist. Give a task folder "
                "(instruction.md, task.toml, tests/) or a directory of them."
            )
        from envlab.envs.replay.spec import is_replay_dir, load_replay_env

        if is_replay_dir(path):  # written by `envlab sim-from-logs`
            return load_replay_env(path, **kwargs)
        from envlab.envs.taskfolder import load_task_env

        return load_task_env(path, **kwargs)
    factory = family_factory(name) or ENVS.resolve(name)
    try:
        env = factory(**kwargs)
    except TypeError as e:
        raise ConfigError(f"cannot build environment {name!r} with arguments {kwargs}: {e}") from e
    except ValueError as e:
        raise ConfigError(f"bad arguments for environment {name!r}: {e}") from e
    if not isinstance(env, EnvSpec):
        raise ConfigError(
            f"{name!r} produced a {type(env).__name__}, not an envlab EnvSpec; the entry must "
            "be an EnvSpec subclass (or a function returning an EnvSpec): the spec defines the "
            "environment and makes a fresh Environment per episode (docs/concepts.md)"
        )
    return env


def family_factory(name: str) -> Any | None:
    """For ``PREFIX:ITEM`` (``rg:leg_counting``, ``gym:Taxi-v4``) where an adapter registered
    the family ``PREFIX:*`` (an ``envlab.envs`` entry point): its factory, to be called with the
    whole name first (``factory(name, **config)``); else ``None``."""
    prefix, sep, item = name.partition(":")
    if not sep or not item or prefix.endswith(".py") or "*" in name:
        return None
    names = ENVS.names()
    if name in names or f"{prefix}:*" not in names:
        return None
    return functools.partial(ENVS.resolve(f"{prefix}:*"), name)


__all__ = ["ENVS", "family_factory", "load_env"]
