"""``EnvSpec``: the definition of an environment (config, tasks, limits, identity)."""

from __future__ import annotations

import hashlib
import inspect
import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from enum import Enum
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from envlab.core.environment import Environment
from envlab.core.errors import ConfigError
from envlab.core.limits import Limits
from envlab.core.types import Task, TaskSet

if TYPE_CHECKING:
    from envlab.core.wrappers import Wrapper


class NoConfig(BaseModel):
    """The config of an environment that takes none."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class EnvSpec(ABC):
    """What an environment is: a pydantic ``Config``, its tasks, its limits, its identity.

    A spec is what the CLI, the registry, vet and the trainers hold; ``new_episode()`` makes
    the ``Environment`` of one episode (by default ``environment(self)``). ``content_hash()``
    names the definition (code of the spec and environment classes + canonical config): equal
    across processes and machines for the same code and config, and what ``--resume``, group
    ids and ``compare`` match on.
    """

    id: ClassVar[str] = ""
    description: ClassVar[str] = ""
    version: ClassVar[str] = "1"
    Config: ClassVar[type[BaseModel]] = NoConfig
    environment: ClassVar[type[Environment]]
    default_limits: ClassVar[Limits] = Limits()

    def __init__(self, config: BaseModel | Mapping[str, Any] | None = None, **values: Any) -> None:
        if isinstance(config, BaseModel):
            config = config.model_dump()
        try:
            self.config = self.Config.model_validate({**(config or {}), **values})
        except ValidationError as e:
            raise ConfigError(
                f"bad config for environment {self.name!r}: {_problems(e)}. "
                f"Its fields: {', '.join(self.Config.model_fields) or '(none)'}"
            ) from None
        # refused now, not when first hashed: a config must be plain data
        self._config_json = canonical_json(self.config, f"the config of {self.name!r}")

    @property
    def name(self) -> str:
        """The environment's id (``env_id`` of every trajectory)."""
        return self.id or type(self).__name__

    @abstractmethod
    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        """The tasks of this environment, deterministic in ``seed``."""

    def new_episode(self) -> Environment:
        """A fresh ``Environment`` for one episode."""
        return self.environment(self)  # type: ignore[call-arg]

    def limits(self, task: Task) -> Limits:
        """The limits of an episode of ``task`` (``default_limits`` unless the task says)."""
        return self.default_limits

    async def prepare(self, tasks: Iterable[Task]) -> None:
        """Build what the episodes of ``tasks`` share (images, workspaces) before any of them
        starts, so that no episode's reset limit pays for it. The episode driver calls it once
        per run; it reports its progress on the ``envlab.prepare`` logger. A task that cannot
        be prepared is left for its episodes to report. The default has nothing to build."""
        del tasks

    def code(self) -> Iterable[type]:
        """The classes whose source defines this environment (hashed by ``content_hash``)."""
        yield type(self)
        env_cls = getattr(type(self), "environment", None)
        if env_cls is not None:
            yield env_cls

    def content_hash(self) -> str:
        """Hash of the code (every class in the MRO of ``code()``) and the canonical config;
        computed once per spec (a spec is a definition: its config does not change)."""
        cached: str | None = getattr(self, "_content_hash", None)
        if cached is None:
            cached = self._content_hash = self._compute_hash()
        return cached

    def seed_hash(self) -> str:
        """The hash episode ids and seeds derive from: the content hash, except that a wrapped
        spec keeps its inner spec's (``WrappedSpec``), so that a clean run and a perturbed run
        of the same tasks play the same episode seeds and pair episode for episode."""
        return self.content_hash()

    def _compute_hash(self) -> str:
        h = hashlib.sha256()
        for cls in self.code():
            _hash_code(h, cls)
        h.update(self._config_json)
        return h.hexdigest()[:16]

    def wrap(self, wrapper: type[Wrapper], **params: Any) -> EnvSpec:
        """This spec with every episode wrapped in ``wrapper(env, **params)``; the result has
        its own hash, which includes the wrapper's code and parameters."""
        from envlab.core.wrappers import WrappedSpec

        return WrappedSpec(self, wrapper, **params)


def _hash_code(h: Any, cls: type) -> None:
    for klass in cls.__mro__:
        if klass is object or klass.__module__.startswith(("builtins", "abc", "pydantic")):
            continue
        try:
            h.update(inspect.getsource(klass).encode())
        except (OSError, TypeError):
            h.update(f"{klass.__module__}.{klass.__qualname__}".encode())


def canonical_json(value: Any, what: str) -> bytes:
    """``value`` as canonical JSON: maps with sorted keys, sets sorted, models as their fields,
    enums as their values, paths as strings. Anything else (an object, a function) is a
    ``ConfigError``: its address or its iteration order would change the hash in every process."""
    try:
        plain = _plain(value)
        return json.dumps(plain, sort_keys=True, separators=(",", ":")).encode()
    except (TypeError, ValueError) as e:
        raise ConfigError(
            f"{what} must be plain JSON data (numbers, strings, lists, maps; sets and pydantic "
            f"models are converted) to be hashed the same in every process: {e}"
        ) from None


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, BaseModel):
        return {k: _plain(getattr(value, k)) for k in type(value).model_fields}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((_plain(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, Enum):
        return _plain(value.value)
    if isinstance(value, PurePath):
        return str(value)
    raise TypeError(f"{type(value).__name__} value {value!r:.80} is not plain data")


def _problems(e: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '(config)'}: {err['msg']}" for err in e.errors()
    )
