"""The examples in the mode users get by default where images build: each Dockerfile built
into an image from a real mmdebstrap base (Debian's and Ubuntu's archives), graded ``separate``.
Oracle 1.0, no-op 0.0, and the universal forging agent 0.0 with nothing excluded, on every
example. Slow (bases are built once per cache, from the network): run in CI."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from envlab.cli.options import open_agent
from envlab.cli.task_runs import check, run_samples
from envlab.envs.taskfolder.spec import TerminalEnv
from tests.envs.taskfolder import image_support
from tests.envs.taskfolder.conftest import EXAMPLES
from tests.envs.taskfolder.image_support import needs_image_host

image_cache = image_support.image_cache
FORGER = Path(__file__).parent / "attacks" / "universal_forger.sh"
IMAGE_EXAMPLES = {"csv-aggregate", "env-settings", "fix-bug-pytest", "hello-file",
                  "json-transform", "sqlite-report", "textstats-pytest"}  # fmt: skip
"""Their FROM is a base envlab builds (alpine and no Dockerfile run on the host)."""

pytestmark = [
    pytest.mark.slow,
    needs_image_host,
    pytest.mark.skipif(shutil.which("mmdebstrap") is None, reason="needs mmdebstrap (Debian)"),
    pytest.mark.filterwarnings("ignore:.*FROM.*is not met:RuntimeWarning"),
]


@pytest.fixture
def images_on(image_cache: Path) -> Iterator[None]:
    old = os.environ.get("ENVLAB_IMAGES")
    os.environ["ENVLAB_IMAGES"] = "auto"
    try:
        yield
    finally:
        os.environ["ENVLAB_IMAGES"] = old or "off"


@pytest.mark.timeout(1800)
async def test_examples_in_image_mode_keep_their_contract(images_on: None) -> None:
    rows = await check(EXAMPLES, runs=1, noop_runs=1, concurrency=2)  # vet[auto] runs 2
    imaged = {r.task_id for r in rows if "mode: image" in r.notes}
    assert imaged == IMAGE_EXAMPLES, imaged
    for row in rows:
        assert row.ok, (row.task_id, row.problems)
        assert "verifier mode: separate" in row.notes, (row.task_id, row.notes)


@pytest.mark.timeout(1800)
async def test_the_universal_forger_scores_0_on_every_example_in_image_mode(
    images_on: None,
) -> None:
    spec = TerminalEnv(EXAMPLES)
    forger = open_agent(f"shell:{FORGER}", {})
    try:
        (rows,) = await run_samples(
            spec, [(forger, 1)], list(spec.tasks()), concurrency=2, max_retries=0
        )
    finally:
        await forger.aclose()
    assert len(rows) == len(list(spec.tasks()))
    for row in rows:
        assert row.status == "ok", (row.task_id, row.status, row.error)
        assert row.reward == 0.0, (row.task_id, row.reward, row.verifier_output_tail)


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("images", ["auto", "off"])
async def test_vet_rates_every_example_ok_in_both_runtimes(
    image_cache: Path, tmp_path: Path, images: str
) -> None:
    """As a new user would meet them: each example's verdict is ``ok`` in its image and on the
    host (three were ``broken`` in image mode before their images had their test runners)."""
    from envlab.vet.runner import VetConfig, vet_environment

    result = await vet_environment(
        TerminalEnv(EXAMPLES, images=images), out_dir=tmp_path / "vet",
        config=VetConfig(oracle_runs=2),
    )  # fmt: skip
    verdicts = {t.task_id: t.verdict for t in result.tasks}
    assert verdicts == dict.fromkeys(verdicts, "ok"), verdicts
    assert len(verdicts) >= 9


@pytest.mark.timeout(1800)
async def test_on_a_real_base_graded_shared_the_forger_scores_0(
    images_on: None, tmp_path: Path
) -> None:
    """Two examples on real bases (python:3.11-slim, ubuntu:24.04) declared ``shared``: the
    oracle still scores 1 (calibrated on its own run), the universal forger 0, nothing excluded."""
    for name in ("json-transform", "hello-file"):
        dst = tmp_path / "tasks" / name
        shutil.copytree(EXAMPLES / name, dst)
        toml = dst / "task.toml"
        toml.write_text(
            toml.read_text().replace("[verifier]\n", '[verifier]\nenvironment_mode = "shared"\n')
        )
    rows = await check(tmp_path / "tasks", runs=1, noop_runs=1, concurrency=2)
    for row in rows:
        assert row.ok and "verifier mode: shared" in row.notes, (row.task_id, row.problems)
    spec = TerminalEnv(tmp_path / "tasks")
    forger = open_agent(f"shell:{FORGER}", {})
    try:
        (forged,) = await run_samples(spec, [(forger, 1)], list(spec.tasks()), concurrency=2)
    finally:
        await forger.aclose()
    for row in forged:
        assert row.status == "ok" and row.reward == 0.0, (row.task_id, row.status, row.error)
