"""The ``local`` debugging backend: no isolation, loud about it, same API and limits."""

from __future__ import annotations

from pathlib import Path

import pytest

from envlab.core import ConfigError
from envlab.sandbox import Limits, LocalSandbox, create_sandbox


async def test_local_backend_warns_and_runs_in_a_temporary_workspace(tmp_path: Path) -> None:
    (tmp_path / "given.txt").write_text("template\n")
    with pytest.warns(RuntimeWarning, match="NO ISOLATION"):
        box = await create_sandbox("local", template=tmp_path, limits=Limits(output_bytes=4096))
    assert isinstance(box, LocalSandbox)
    try:
        res = await box.exec("cat given.txt; pwd")
        assert res.stdout.splitlines() == ["template", str(box.host_workdir)]
        await box.write_file("/app/sub/f.txt", "x")
        assert await box.read_file("sub/f.txt") == b"x"
        assert (box.host_workdir / "sub" / "f.txt").read_text() == "x"
        slow = await box.exec("sleep 20", timeout=0.3)
        assert slow.timed_out and slow.exit_code == 137
        big = await box.exec("head -c 100000 /dev/zero")
        assert big.truncated and len(big.stdout) < 4096 + 200
    finally:
        await box.close()
    assert not box.host_workdir.exists()
    assert (tmp_path / "given.txt").read_text() == "template\n"


async def test_unknown_backend_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown sandbox backend"):
        await create_sandbox("docker")
