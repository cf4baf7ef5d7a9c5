"""task.toml values no host can honour are refused, naming the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from envlab.core import ConfigError
from envlab.envs.taskfolder import load_task_folder
from envlab.envs.taskfolder.model import MAX_INSTRUCTION_BYTES, host_memory_mb, state_fs_mb
from tests.envs.taskfolder.conftest import make_task, write


def refused(tmp_path: Path, toml: str) -> str:
    path = make_task(tmp_path)
    write(path / "task.toml", toml)
    with pytest.raises(ConfigError) as err:
        load_task_folder(path)
    msg = str(err.value)
    assert msg.startswith(str(path / "task.toml") + ": ")
    return msg


@pytest.mark.parametrize(
    ("toml", "field"),
    [
        ("[agent]\ntimeout_sec = inf\n", "agent.timeout_sec"),
        ("[agent]\ntimeout_sec = nan\n", "agent.timeout_sec"),
        ("[verifier]\ntimeout_sec = inf\n", "verifier.timeout_sec"),
        ("[verifier]\ntimeout_sec = 1e300\n", "verifier.timeout_sec"),
        ("[environment]\nbuild_timeout_sec = -inf\n", "environment.build_timeout_sec"),
        ("[environment]\nbuild_timeout_sec = nan\n", "environment.build_timeout_sec"),
        ("[environment]\ncpus = inf\n", "environment.cpus"),
        ("[environment]\ncpus = 1e9\n", "environment.cpus"),
        ("[environment]\nmemory_mb = 0\n", "environment.memory_mb"),
        ("[environment]\nmemory_mb = inf\n", "environment.memory_mb"),
        ("[environment]\nstorage_mb = 1e20\n", "environment.storage_mb"),
        ("[environment]\nstorage_mb = 2_000_000\n", "environment.storage_mb"),  # > 1 TiB
    ],
)
def test_bad_values_are_refused(tmp_path: Path, toml: str, field: str) -> None:
    assert f": {field}: " in refused(tmp_path, toml)


def test_more_memory_than_the_host_has_is_refused(tmp_path: Path) -> None:
    # attack: memory_mb beyond the host was retried as an infra_error every episode
    too_much = host_memory_mb() + 1
    msg = refused(tmp_path, f"[environment]\nmemory_mb = {too_much}\n")
    assert "environment.memory_mb: " in msg and "physical memory" in msg
    msg = refused(tmp_path, '[environment]\nmemory = "100T"\n')  # the older spelling too
    assert "environment.memory_mb: " in msg


def test_more_storage_than_the_state_disk_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # attack: a huge storage_mb crashed at the first command
    monkeypatch.setenv("ENVLAB_SANDBOX_DIR", str(tmp_path / "state" / "not-yet"))
    where, size = state_fs_mb()
    assert where == tmp_path and not (tmp_path / "state").exists(), "nothing is created"
    if size + 1 > 1 << 20:
        pytest.skip("the state disk is larger than 1 TiB")
    msg = refused(tmp_path, f"[environment]\nstorage_mb = {size + 1}\n")
    assert "environment.storage_mb: " in msg and "ENVLAB_SANDBOX_DIR" in msg


def test_sane_values_load(tmp_path: Path) -> None:
    path = make_task(tmp_path)
    write(path / "task.toml", "[agent]\ntimeout_sec = 3600\n[environment]\n"
          "memory_mb = 512\nstorage_mb = 1024\ncpus = 2.5\nbuild_timeout_sec = 60\n")  # fmt: skip
    env = load_task_folder(path).config.environment
    assert (env.memory_mb, env.storage_mb, env.cpus) == (512, 1024, 2.5)


def test_contradicting_legacy_sizes_are_refused(tmp_path: Path) -> None:
    msg = refused(tmp_path, '[environment]\nmemory = "1G"\nmemory_mb = 2048\n')
    assert "environment: memory = '1G' (1024 MB) contradicts memory_mb" in msg
    path = make_task(tmp_path, "u")
    write(path / "task.toml", '[environment]\nstorage = "2G"\n')
    assert load_task_folder(path).config.environment.storage_mb == 2048


def test_a_huge_instruction_is_refused_without_reading_it(tmp_path: Path) -> None:
    # attack: a 50 MB instruction was stored again in every trajectory
    path = make_task(tmp_path)
    with (path / "instruction.md").open("wb") as f:
        f.truncate(50 << 20)  # sparse: refusing it must not read 50 MB
    with pytest.raises(ConfigError) as err:
        load_task_folder(path)
    assert str(err.value).startswith(f"{path / 'instruction.md'}: 52428800 bytes is more than")
    assert "environment/" in str(err.value)
    (path / "instruction.md").write_text("é" * (MAX_INSTRUCTION_BYTES // 2))  # exactly the cap
    assert len(load_task_folder(path).instruction) == MAX_INSTRUCTION_BYTES // 2


def test_an_instruction_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    path = make_task(tmp_path)
    (path / "instruction.md").write_bytes(b"caf\xe9\n")
    with pytest.raises(ConfigError, match=r"instruction\.md is not UTF-8 text \(byte 3\)"):
        load_task_folder(path)
