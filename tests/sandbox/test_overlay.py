"""The verifier without a copy: ``app_overlay=True`` shows a frozen workspace at ``/app`` whose
writes go to the sandbox's own bounded storage, so grading never changes the frozen state."""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

import pytest

from envlab.core import ConfigError
from envlab.sandbox import BubblewrapSandbox, GiB, MiB
from tests.sandbox.conftest import SMALL, requires_bwrap, requires_root

pytestmark = [requires_bwrap, requires_root]

AGENT = SMALL.model_copy(
    update={"storage_bytes": 128 * MiB, "max_file_bytes": 16 * GiB, "timeout_s": 60}
)
VERIFIER = SMALL.model_copy(
    update={"storage_bytes": 32 * MiB, "max_file_bytes": 16 * GiB, "timeout_s": 60}
)


def state(root: Path) -> str:
    """Paths, modes, link targets and contents (holes read as zeros) of a tree."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        h.update(f"{p.relative_to(root)} {st.st_mode:o} {st.st_nlink}\n".encode())
        if p.is_symlink():
            h.update(os.readlink(p).encode())
        elif p.is_file() and st.st_size < 1 << 26:
            h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture
async def frozen():
    """An agent's sandbox after the episode: files, a hard link, an 8 GiB sparse file."""
    box = await BubblewrapSandbox.create(limits=AGENT, name="agent")
    try:
        res = await box.exec(
            "mkdir -p src && echo 'def f(): return 1' > src/m.py && echo 41 > answer.txt && "
            "head -c 1000000 /dev/urandom > blob && ln blob blob2 && truncate -s 8G sparse && "
            "chmod 600 answer.txt"
        )
        assert res.exit_code == 0, res.stderr
        await box.kill_all()
        yield box
    finally:
        await box.close()


async def test_verifier_writes_never_reach_the_frozen_workspace(frozen) -> None:
    ws = frozen.host_workdir
    before = state(ws)
    writes = (
        "cat answer.txt && echo 1 > answer.txt && cat answer.txt && rm blob && mkdir new && "
        "echo x > new/f && echo 2 >> src/m.py && truncate -s 0 sparse && chmod 777 src && "
        "ln -s /tests/x link && ls"
    )
    for _ in range(2):  # grading twice: the second verifier sees exactly what the first did
        verifier = BubblewrapSandbox(app_dir=ws, app_overlay=True, limits=VERIFIER, name="v")
        try:
            await asyncio.to_thread(verifier.prepare)
            assert not any(verifier._upper.iterdir()), "nothing was copied to set it up"
            res = await verifier.exec(writes)
            assert res.exit_code == 0, res.stderr
            assert res.stdout.split("\n")[:2] == ["41", "1"]
            again = await verifier.exec("cat answer.txt new/f; test -e blob || echo no-blob")
            assert again.stdout == "1\nx\nno-blob\n", "writes persist between its commands"
        finally:
            await verifier.close()
        assert state(ws) == before, "the frozen workspace is unchanged"
        assert (ws / "answer.txt").read_text() == "41\n"


async def test_verifier_writes_are_bounded(frozen) -> None:
    verifier = await BubblewrapSandbox.create(
        app_dir=frozen.host_workdir, app_overlay=True, limits=VERIFIER
    )
    try:
        assert verifier.storage_kind == "ext4"
        res = await verifier.exec(
            "head -c 200000000 /dev/zero > /app/big; echo 'x' >> /app/sparse; "
            "head -c 100000000 /dev/zero > /tmp/big; du -sb /app/big /tmp/big"
        )
        assert "No space left on device" in res.stderr
        sizes = [int(line.split()[0]) for line in res.stdout.splitlines()]
        assert sum(sizes) <= 32 * MiB
        image = verifier.storage.image  # type: ignore[union-attr]
        assert image.stat().st_blocks * 512 <= 32 * MiB
    finally:
        await verifier.close()
    assert (frozen.host_workdir / "sparse").stat().st_size == 8 * GiB


async def test_commands_of_an_overlay_sandbox_take_turns(frozen) -> None:
    verifier = await BubblewrapSandbox.create(
        app_dir=frozen.host_workdir, app_overlay=True, limits=VERIFIER
    )
    try:
        results = await asyncio.gather(
            *(verifier.exec(f"echo {i} > f{i} && cat f{i}") for i in range(4))
        )
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(4)]
    finally:
        await verifier.close()


async def test_overlay_needs_an_existing_directory(tmp_path) -> None:
    with pytest.raises(ConfigError, match="app_overlay=True needs app_dir"):
        BubblewrapSandbox(app_overlay=True, limits=VERIFIER)
    with pytest.raises(ConfigError, match="app_overlay=True needs app_dir"):
        BubblewrapSandbox(app_dir=tmp_path / "none", app_overlay=True)
