"""task.toml's network policy as Harbor 0.25 writes it, per phase, with the older spellings."""

from __future__ import annotations

from pathlib import Path

import pytest

from envlab.core import ConfigError
from envlab.envs.taskfolder import load_task_folder
from tests.envs.taskfolder.conftest import make_task, write

PHASES = ("setup", "agent", "verifier")


def policy(tmp_path: Path, toml: str) -> tuple[bool, bool, bool]:
    path = make_task(tmp_path)
    write(path / "task.toml", toml)
    config = load_task_folder(path).config
    return tuple(config.network_for(p) for p in PHASES)  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        # envlab's default is no network (Harbor's is public: a task that needs it says so)
        ("", (False, False, False)),
        ('[environment]\nnetwork_mode = "no-network"\n', (False, False, False)),
        ('[environment]\nnetwork_mode = "public"\n', (True, True, True)),
        # [agent] and [verifier] override the environment's baseline, each for its phase
        ('[environment]\nnetwork_mode = "public"\n[agent]\nnetwork_mode = "no-network"\n',
         (True, False, True)),
        ('[environment]\nnetwork_mode = "public"\n[verifier]\nnetwork_mode = "no-network"\n',
         (True, True, False)),
        ('[agent]\nnetwork_mode = "public"\n', (False, True, False)),
        # a separate verifier environment is the verifier's baseline
        ('[environment]\nnetwork_mode = "public"\n[verifier.environment]\n'
         'network_mode = "no-network"\n', (True, True, False)),
        ('[verifier.environment]\nallow_internet = true\n', (False, False, True)),
        # envlab's earlier spellings and Harbor's deprecated allow_internet
        ('[environment]\nnetwork_mode = "none"\n', (False, False, False)),
        ('[environment]\nnetwork_mode = "host"\n', (True, True, True)),
        ('[environment]\nnetwork_mode = "bridge"\n', (True, True, True)),
        ("[environment]\nallow_internet = true\n", (True, True, True)),
        ("[environment]\nallow_internet = false\n", (False, False, False)),
        # as in Harbor, an explicit network_mode wins over allow_internet
        ('[environment]\nnetwork_mode = "no-network"\nallow_internet = true\n',
         (False, False, False)),
    ],
)  # fmt: skip
def test_network_per_phase(tmp_path: Path, toml: str, expected: tuple[bool, ...]) -> None:
    assert policy(tmp_path, toml) == expected


@pytest.mark.parametrize("section", ["environment", "agent", "verifier"])
def test_an_allowlist_is_refused_naming_the_file_and_field(tmp_path: Path, section: str) -> None:
    path = make_task(tmp_path)
    write(path / "task.toml",
          f'[{section}]\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org"]\n')  # fmt: skip
    with pytest.raises(ConfigError) as err:
        load_task_folder(path)
    msg = str(err.value)
    assert msg.startswith(f"{path / 'task.toml'}: {section}.network_mode: 'allowlist' cannot")
    assert "safely" in msg and ";" not in msg, "one problem, not a second about allowed_hosts"


def test_allowed_hosts_without_an_allowlist_and_unknown_modes_are_refused(tmp_path: Path) -> None:
    path = make_task(tmp_path)
    write(path / "task.toml", '[agent]\nnetwork_mode = "public"\nallowed_hosts = ["x.org"]\n')
    with pytest.raises(ConfigError, match=r"agent\.allowed_hosts: .*only valid with"):
        load_task_folder(path)
    write(path / "task.toml", '[environment]\nnetwork_mode = "internet"\n')
    with pytest.raises(ConfigError, match=r"environment\.network_mode: .*'no-network'"):
        load_task_folder(path)


def test_a_harbor_task_toml_loads(tmp_path: Path) -> None:
    # the shape `harbor tasks init` writes today (schema 1.4)
    path = make_task(tmp_path)
    write(path / "task.toml", """
        schema_version = "1.4"
        [task]
        name = "org/t"
        [metadata]
        difficulty = "easy"
        [verifier]
        timeout_sec = 120.0
        [agent]
        timeout_sec = 300.0
        [environment]
        build_timeout_sec = 600.0
        cpus = 1
        memory_mb = 2048
        storage_mb = 10240
        gpus = 0
        network_mode = "no-network"
        [solution.env]
        """)  # fmt: skip
    config = load_task_folder(path).config
    assert config.environment.network_mode == "no-network" and not config.network_for("agent")
    assert config.agent.timeout_sec == 300 and config.environment.memory_mb == 2048
