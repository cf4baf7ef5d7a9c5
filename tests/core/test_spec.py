"""``EnvSpec``: a validated pydantic config, and a ``content_hash()`` that names the definition
(code + canonical config) the same way in every process and never holds an object address."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from envlab.agents.scripted import OracleAgent
from envlab.core import Agent, ConfigError, Environment, EnvSpec, Task, TaskSet, ToolEnv
from envlab.envs.arith import ArithEnv
from envlab.envs.calc import CalcConfig, CalcEnv, CalcEpisode
from tests.support.envs import EchoEnv, EchoEpisode
from tests.support.play import echo_with, hash_in_subprocess

CALC = "from envlab.envs.calc import CalcEnv"


class AnyConfig(BaseModel):
    """A config that (wrongly) lets any Python value in."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    thing: Any = None


class AnyEnv(EnvSpec):
    Config = AnyConfig
    environment = EchoEpisode

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        return TaskSet([Task(id="t", prompt="say ok", answer="ok")])


class TagsConfig(BaseModel):
    model_config = ConfigDict(frozen=True)
    tags: frozenset[str] = frozenset()


class TaggedEnv(EnvSpec):
    """A spec whose config holds a set (JSON has none: its order must not reach the hash)."""

    Config = TagsConfig
    environment = EchoEpisode

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        return TaskSet([Task(id="t", prompt="say ok", answer="ok")])


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: CalcEnv(min_ops=0), "min_ops"),
        (lambda: CalcEnv(max_ops="many"), "max_ops"),
        (lambda: CalcEnv(colour="red"), "colour"),
        (lambda: CalcEnv(min_ops=3, max_ops=2), "min_ops <= max_ops"),
        (lambda: ArithEnv(level=7), "level"),
        (lambda: ArithEnv({"size": 0}), "size"),
    ],
    ids=["too-small", "not-a-number", "unknown-field", "cross-field", "literal", "mapping"],
)
def test_a_bad_config_is_a_config_error_naming_the_field(make: Any, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        make()


def test_a_config_error_says_which_environment_and_its_fields() -> None:
    with pytest.raises(ConfigError) as e:
        CalcEnv(max_ops=0)
    assert str(e.value).startswith("bad config for environment 'calc': max_ops: ")
    assert str(e.value).endswith("Its fields: min_ops, max_ops, size")


def test_the_config_may_be_given_as_values_a_mapping_or_the_model() -> None:
    a = CalcEnv(max_ops=2)
    b = CalcEnv({"max_ops": 2})
    c = CalcEnv(CalcConfig(max_ops=2))
    assert a.config == b.config == c.config
    assert a.content_hash() == b.content_hash() == c.content_hash()


def test_content_hash_is_the_same_in_other_processes() -> None:
    here = CalcEnv().content_hash()
    assert len(here) == 16 and int(here, 16) >= 0
    assert hash_in_subprocess(CALC, "CalcEnv()", hash_seed=1) == here
    assert hash_in_subprocess(CALC, "CalcEnv()", hash_seed=2) == here
    assert CalcEnv().content_hash() == here, "a second instance is the same definition"


def test_content_hash_changes_with_config_and_code() -> None:
    base = CalcEnv().content_hash()
    assert CalcEnv(max_ops=2).content_hash() != base
    assert CalcEnv(max_ops=2).content_hash() == CalcEnv(max_ops=2).content_hash()
    assert CalcEnv(max_ops=3).content_hash() == base, "the default, given explicitly"
    assert ArithEnv().content_hash() != base
    assert EchoEnv().content_hash() != base

    class OtherEpisode(EchoEpisode):
        def system_prompt(self) -> str:
            return "be brief"

    assert echo_with(OtherEpisode).content_hash() != EchoEnv().content_hash(), (
        "the episode class is part of the definition"
    )


def test_a_config_value_that_is_not_json_is_refused() -> None:
    """An object's repr holds its address, which would change the hash in every process."""
    for value in (object(), lambda: 1.0, OracleAgent()):
        with pytest.raises(ConfigError, match="JSON"):
            AnyEnv(thing=value).content_hash()


def test_plain_json_config_values_hash() -> None:
    a = AnyEnv(thing={"b": [1, 2.5, None], "a": "x"}).content_hash()
    assert a == AnyEnv(thing={"a": "x", "b": [1, 2.5, None]}).content_hash(), "keys sorted"
    assert (
        hash_in_subprocess(
            "from tests.core.test_spec import AnyEnv",
            "AnyEnv(thing={'b': [1, 2.5, None], 'a': 'x'})",
            hash_seed=3,
        )
        == a
    )


def test_a_set_in_the_config_hashes_the_same_in_every_process() -> None:
    tags = "['alpha', 'beta', 'gamma', 'delta', 'epsilon']"
    hashes = {
        hash_in_subprocess(
            "from tests.core.test_spec import TaggedEnv", f"TaggedEnv(tags={tags})", hash_seed=s
        )
        for s in (1, 2, 3)
    }
    assert len(hashes) == 1, hashes


def test_environment_is_one_episode_with_nothing_of_the_definition() -> None:
    for name in ("spawn", "content_hash", "config", "max_steps", "tasks", "code", "limits"):
        assert not hasattr(Environment, name), name
        assert not hasattr(CalcEpisode, name), name
    assert Environment.__new__ is object.__new__ and ToolEnv.__new__ is object.__new__
    assert Agent.__new__ is object.__new__ and not hasattr(Agent, "spawn")


def test_new_episode_is_a_fresh_environment_that_knows_its_spec() -> None:
    spec = CalcEnv(max_ops=2)
    a, b = spec.new_episode(), spec.new_episode()
    assert isinstance(a, CalcEpisode) and isinstance(b, CalcEpisode) and a is not b
    assert a.spec is spec and a.unwrapped is a


def test_name_is_the_id_or_the_class_name() -> None:
    assert CalcEnv().name == "calc" and EchoEnv().name == "echo"
    assert AnyEnv().name == "AnyEnv"
