"""task.toml and task folders on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from envlab.core import ConfigError
from envlab.envs.taskfolder import TerminalEnv, find_task_folders, load_task_folder
from tests.envs.taskfolder.conftest import make_task, write


def test_task_toml_fields_and_legacy_spellings(tmp_path: Path) -> None:
    path = make_task(
        tmp_path,
        toml='[environment]\nallow_internet = true\nmemory = "2G"\nsurprise = 1\n'
        '[metadata]\ndifficulty = "hard"\n[task]\nname = "org/t"\n',
    )
    f = load_task_folder(path)
    env = f.config.environment
    assert env.network_mode == "public" and env.memory_mb == 2048
    assert f.config.agent.timeout_sec == 60 and f.config.verifier.timeout_sec == 30
    assert f.config.unknown_keys() == ["environment.surprise"]
    task = TerminalEnv(path).tasks()[0]
    assert task.id == "t" and task.prompt == "Do the thing.\n"
    assert task.metadata["difficulty"] == "hard" and "agent_timeout_sec" not in task.metadata
    assert task.answer == str(path / "solution" / "solve.sh")
    assert "solve" not in task.public_view()["prompt"]


def test_broken_folders_say_what_is_missing(tmp_path: Path) -> None:
    path = make_task(tmp_path)
    (path / "tests" / "test.sh").unlink()
    with pytest.raises(ConfigError, match=r"no tests/test\.sh"):
        load_task_folder(path)
    other = make_task(tmp_path, "u")
    (other / "instruction.md").unlink()
    write(other / "task.toml", "[agent\n")
    with pytest.raises(ConfigError, match=r"no instruction\.md"):
        load_task_folder(other)
    write(other / "instruction.md", "x")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_task_folder(other)
    write(other / "task.toml", "[agent]\ntimeout_sec = -1\n")
    with pytest.raises(ConfigError, match=r"agent\.timeout_sec"):
        load_task_folder(other)
    with pytest.raises(ConfigError, match="does not exist"):
        find_task_folders(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="neither a task folder"):
        find_task_folders(tmp_path / "empty")


def test_a_directory_of_task_folders_is_a_task_set(tmp_path: Path) -> None:
    for name in ("b", "a", "c"):
        make_task(tmp_path, name)
    (tmp_path / "not-a-task").mkdir()
    env = TerminalEnv(tmp_path)
    assert [t.id for t in env.tasks()] == ["a", "b", "c"]
    assert [t.id for t in env.tasks(n=2)] == ["a", "b"]
    with pytest.raises(ConfigError, match="split"):
        env.tasks(split="train")


def test_content_hash_follows_the_folder(tmp_path: Path) -> None:
    path = make_task(tmp_path)
    h1 = TerminalEnv(path).content_hash()
    assert TerminalEnv(path).content_hash() == h1
    write(path / "tests" / "test.sh", "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n")
    assert TerminalEnv(path).content_hash() != h1
