"""The task runtime's protocol as its callers see it: what is prepared before the episodes,
which mode runs and why, said once."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from envlab.agents import load_agent
from envlab.envs.taskfolder import TerminalEnv, load_task_folder
from envlab.rollout import PlannedEpisode, episode_ids, run_episodes
from envlab.sandbox.tasks.runtime import host_mode_reason, prepare_runtime
from tests.envs.taskfolder import image_support
from tests.envs.taskfolder.image_support import needs_image_host, write_task

image_cache = image_support.image_cache
tiny_base = image_support.tiny_base
tiny_rootfs = image_support.tiny_rootfs

pytestmark = needs_image_host
DOCKERFILE = "FROM envlab-test/tiny:1\nWORKDIR /app\nRUN echo built > /app/built\n"
TEST_SH = "if [ -f /app/done ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"


def test_the_driver_prepares_every_task_before_any_episode(
    tiny_base: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for name in ("a", "b"):
        write_task(tmp_path, name, DOCKERFILE, test_sh=TEST_SH, solve_sh="touch /app/done\n")
    spec = TerminalEnv(tmp_path, images="auto")
    oracle = load_agent("oracle")
    plan = [
        PlannedEpisode(t, 0, episode_ids(spec.name, spec.seed_hash(), t.id, 0, 0), oracle)
        for t in spec.tasks()
    ]
    with caplog.at_level(logging.INFO, logger="envlab.prepare"):
        trajs = asyncio.run(run_episodes(spec, plan, concurrency=2))
    prepared = [r.getMessage() for r in caplog.records if r.name == "envlab.prepare"]
    assert any("[1/2]" in m and "image, separate verifier" in m for m in prepared), prepared
    assert any("[2/2]" in m for m in prepared), prepared
    assert [t.reward for t in trajs] == [1.0, 1.0]


def test_a_missing_mmdebstrap_is_said_once_and_the_host_mode_runs(
    image_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    monkeypatch.setenv("PATH", "/nonexistent")  # no mmdebstrap (nor anything else) on PATH
    folders = [
        load_task_folder(write_task(tmp_path, n, "FROM debian:trixie\nWORKDIR /app\n"))
        for n in ("x", "y")
    ]
    with caplog.at_level(logging.WARNING):
        reasons = [host_mode_reason(f, "auto") for f in folders]
    assert all(r and "apt-get install mmdebstrap" in r for r in reasons), reasons
    said = [r for r in caplog.records if "mmdebstrap" in r.getMessage()]
    assert len(said) == 1 and "host-filesystem mode instead" in said[0].getMessage()


def test_the_runtime_says_its_mode_and_notes(tiny_base: str, tmp_path: Path) -> None:
    folder = load_task_folder(write_task(tmp_path, "t", DOCKERFILE, test_sh=TEST_SH))
    image = asyncio.run(prepare_runtime(folder, images="auto"))
    host = asyncio.run(prepare_runtime(folder, images="off"))
    assert (image.mode, image.verifier_mode, image.notes[0]) == ("image", "separate", "mode: image")
    assert host.mode == "host" and host.notes[0].startswith("mode: host (images are off")
    view = asyncio.run(image.workspace_view())
    assert (view / "built").read_text() == "built\n"
