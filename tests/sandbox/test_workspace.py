"""The workspace on the host: a private state directory, copies that keep holes and hard links,
and scrubbing a frozen workspace of what must not reach the verifier."""

from __future__ import annotations

import os
import socket
import stat
import sys
from pathlib import Path

import pytest

from envlab.core import ConfigError
from envlab.sandbox import BubblewrapSandbox, create_sandbox
from envlab.sandbox.workspace import copy_tree, default_state_dir, scrub_tree, state_dir
from tests.sandbox.conftest import SMALL, requires_bwrap, requires_root

GiB = 1 << 30


# --- the state directory -----------------------------------------------------------------------
def test_a_fresh_state_directory_is_made_private(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ENVLAB_SANDBOX_DIR", str(tmp_path / "new" / "state"))
    path = state_dir()
    assert stat.S_IMODE(path.stat().st_mode) == 0o700 and path.stat().st_uid == os.geteuid()
    assert stat.S_IMODE((path / "boxes").stat().st_mode) == 0o700


@requires_root
def test_a_state_directory_made_by_another_user_is_refused(tmp_path, monkeypatch) -> None:
    """Another local user creating the directory first must not get to plant programs in it."""
    planted = tmp_path / "planted"
    planted.mkdir(mode=0o700)
    os.chown(planted, 12345, 12345)
    monkeypatch.setenv("ENVLAB_SANDBOX_DIR", str(planted))
    with pytest.raises(ConfigError, match="belongs to uid 12345") as e:
        state_dir()
    assert "ENVLAB_SANDBOX_DIR" in str(e.value)
    with pytest.raises(ConfigError, match="belongs to uid 12345"):
        BubblewrapSandbox(limits=SMALL)


def test_a_state_directory_others_can_reach_is_refused(tmp_path, monkeypatch) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("ENVLAB_SANDBOX_DIR", str(shared))
    with pytest.raises(ConfigError, match=r"mode 0777.*chmod 700"):
        state_dir()
    shared.chmod(0o700)
    assert state_dir() == shared


def test_a_link_or_a_writable_parent_is_refused(tmp_path, monkeypatch) -> None:
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    monkeypatch.setenv("ENVLAB_SANDBOX_DIR", str(tmp_path / "link"))
    with pytest.raises(ConfigError, match="not a directory"):
        state_dir()
    open_parent = tmp_path / "open"
    open_parent.mkdir()
    open_parent.chmod(0o777)  # not sticky: anyone could rename our directory away
    monkeypatch.setenv("ENVLAB_SANDBOX_DIR", str(open_parent / "state"))
    with pytest.raises(ConfigError, match="another user can change"):
        state_dir()


def test_the_default_state_directory_is_per_user() -> None:
    if os.geteuid() == 0:
        assert default_state_dir() == Path("/var/lib/envlab/sandbox")
    else:
        assert str(default_state_dir()).startswith(os.path.expanduser("~"))


# --- copies ------------------------------------------------------------------------------------
def test_copy_keeps_holes_hard_links_links_modes_and_skips_special_files(tmp_path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "sub").mkdir(parents=True)
    with open(src / "sparse", "wb") as f:  # 8 GiB with 4 KiB of data in the middle
        f.seek(4 * GiB)
        f.write(b"x" * 4096)
        f.truncate(8 * GiB)
    (src / "data").write_bytes(os.urandom(100_000))
    for i in range(50):
        os.link(src / "data", src / "sub" / f"link{i}")
    (src / "abs").symlink_to("/etc/passwd")
    (src / "rel").symlink_to("data")
    os.mkfifo(src / "fifo")
    (src / "script.sh").write_text("echo\n")
    (src / "script.sh").chmod(0o751)
    (src / "sub").chmod(0o750)
    os.utime(src / "data", (1_000_000, 1_000_000))
    copy_tree(src, dst)
    sparse = (dst / "sparse").stat()
    assert sparse.st_size == 8 * GiB and sparse.st_blocks * 512 <= 1 << 20
    with open(dst / "sparse", "rb") as f:
        f.seek(4 * GiB)
        assert f.read(4096) == b"x" * 4096
    data = (dst / "data").stat()
    assert data.st_nlink == 51 and (dst / "sub" / "link9").stat().st_ino == data.st_ino
    assert (dst / "data").read_bytes() == (src / "data").read_bytes()
    assert data.st_mtime == 1_000_000
    assert os.readlink(dst / "abs") == "/etc/passwd" and os.readlink(dst / "rel") == "data"
    assert not (dst / "fifo").exists() and not (dst / "fifo").is_symlink()
    assert stat.S_IMODE((dst / "script.sh").stat().st_mode) == 0o751
    assert stat.S_IMODE((dst / "sub").stat().st_mode) == 0o750


# --- scrubbing ---------------------------------------------------------------------------------
def _planted(root: Path, outside: Path) -> None:
    (root / "sub").mkdir(parents=True)
    (root / "data.txt").write_text("mine")
    (root / "sub" / "file").write_text("deep")
    links = {
        "answer.json": "/tests/expected.json",  # resolves only in the verifier's sandbox
        "abs_in": "/app/data.txt",
        "rel_in": "data.txt",
        "dangling": "/app/missing",
        "zero": "/dev/zero",
        "stdout": "/proc/self/fd/1",
        "escape": "../../etc/passwd",
        "up_and_back": "../app/data.txt",
        "chain": "rel_in",
        "chain_out": "answer.json",
        "loop1": "loop2",
        "loop2": "loop1",
        "dirlink": "sub",
        "via_dirlink": "dirlink/file",
        "root": "/",
        "the_workspace": "/app",
        "tmp": "/tmp/x",
        "python": os.path.realpath(sys.executable),
        "host_dir": str(outside),
        "to_fifo": "fifo",
        "sub/up": "..",
        "sub/answer": "../../tests/expected.json",
    }
    for name, target in links.items():
        (root / name).symlink_to(target)
    os.mkfifo(root / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(root / "sub" / "sock"))
    sock.close()


def test_scrub_removes_what_the_agent_could_not_see_and_keeps_the_rest(tmp_path) -> None:
    root, outside = tmp_path / "ws", tmp_path / "outside"
    outside.mkdir()
    os.mkfifo(outside / "their_fifo")  # behind a link: must never be touched
    _planted(root, outside)
    removed = scrub_tree(root)
    gone = {r["path"]: r for r in removed}
    assert set(gone) == {
        "answer.json", "dangling", "zero", "stdout", "escape", "chain_out", "loop1", "loop2",
        "root", "tmp", "host_dir", "to_fifo", "fifo", "sub/sock", "sub/answer",
    }  # fmt: skip
    assert gone["answer.json"] == {
        "path": "answer.json", "kind": "symlink", "target": "/tests/expected.json",
        "reason": "outside",
    }  # fmt: skip
    assert gone["dangling"]["reason"] == "dangling" and gone["to_fifo"]["reason"] == "dangling"
    assert gone["fifo"]["kind"] == "fifo" and gone["sub/sock"]["kind"] == "socket"
    kept = {"abs_in", "rel_in", "up_and_back", "chain", "dirlink", "via_dirlink", "python"}
    kept |= {"the_workspace", "sub/up"}
    for name in kept:
        assert (root / name).is_symlink(), name
    assert (outside / "their_fifo").exists(), "nothing behind a link is touched"
    assert scrub_tree(root) == [], "idempotent"


def test_scrub_can_refuse_system_links_too(tmp_path) -> None:
    (tmp_path / "python").symlink_to(os.path.realpath(sys.executable))
    (tmp_path / "sh").symlink_to("/bin/sh")
    assert scrub_tree(tmp_path, keep_system=True) == []
    assert {r["path"] for r in scrub_tree(tmp_path, keep_system=False)} == {"python", "sh"}


@requires_bwrap
async def test_scrub_on_what_an_agent_left_in_a_real_sandbox() -> None:
    plant = (
        "ln -s /tests/expected.json /app/totals.json; ln -s /dev/zero /app/input.txt;"
        "ln -s /proc/self/fd/1 /app/log; mkfifo /app/pipe; ln -s pipe /app/to_pipe;"
        "python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"/app/sock\")';"
        "echo 42 > /app/answer.txt; ln -s /app/answer.txt /app/answer_link"
    )
    async with await create_sandbox(limits=SMALL) as box:
        res = await box.exec(plant)
        assert res.exit_code == 0, res.stderr
        await box.kill_all()
        removed = scrub_tree(box.host_workdir)
        assert {r["path"] for r in removed} == {
            "totals.json", "input.txt", "log", "pipe", "to_pipe", "sock",
        }  # fmt: skip
        assert sorted(os.listdir(box.host_workdir)) == ["answer.txt", "answer_link"]
