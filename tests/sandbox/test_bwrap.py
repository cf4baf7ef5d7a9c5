"""The bubblewrap backend: real ``bwrap``, real processes."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from envlab.core import InfraError
from envlab.sandbox import BubblewrapSandbox, Limits, Mount, SandboxFileError, create_sandbox
from envlab.sandbox.uids import processes_of
from tests.sandbox.conftest import SMALL, requires_bwrap, requires_root

pytestmark = requires_bwrap


async def test_exec_reports_output_exit_code_and_runs_in_app(box: BubblewrapSandbox) -> None:
    res = await box.exec("echo out; echo err >&2; pwd; exit 3")
    assert res.stdout == "out\n/app\n"
    assert res.stderr == "err\n"
    assert res.exit_code == 3 and not res.timed_out and not res.truncated and not res.ok
    argv = await box.exec(["printf", "%s|", "a b", "c"])
    assert argv.stdout == "a b|c|" and argv.ok


@requires_root
async def test_runs_as_an_unprivileged_uid_of_its_own(box: BubblewrapSandbox) -> None:
    res = await box.exec("id -u; id -un; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status")
    uid, name, cap_eff, nnp = res.stdout.split("\n")[:4]
    assert int(uid) == box.uid != 0 and name == "agent"
    assert cap_eff.split()[1] == "0000000000000000" and nnp.split()[1] == "1"
    other = await BubblewrapSandbox.create(limits=SMALL)
    try:
        assert other.uid != box.uid
    finally:
        await other.close()


async def test_environment_is_cleared(box: BubblewrapSandbox, monkeypatch) -> None:
    monkeypatch.setenv("ENVLAB_HOST_ONLY_VARIABLE", "leaked")
    res = await box.exec("env", env={"EXTRA": "1"})
    env = dict(line.split("=", 1) for line in res.stdout.splitlines())
    assert "ENVLAB_HOST_ONLY_VARIABLE" not in env
    assert env["HOME"] == "/app" and env["EXTRA"] == "1" and env["TMPDIR"] == "/tmp"


async def test_workspace_and_tmp_persist_between_commands(tmp_path: Path) -> None:
    (tmp_path / "given.txt").write_text("from the template")
    async with await create_sandbox(template=tmp_path, limits=SMALL) as box:
        assert (await box.exec("cat given.txt")).stdout == "from the template"
        await box.exec("echo 1 > /app/made.txt; echo 2 > /tmp/t.txt; mkdir -p sub")
        res = await box.exec("cat /app/made.txt /tmp/t.txt", cwd="sub")
        assert res.stdout == "1\n2\n"
        assert (box.host_workdir / "made.txt").read_text() == "1\n"
        assert (await box.exec("pwd", cwd="sub")).stdout == "/app/sub\n"
        missing = await box.exec("true", cwd="/app/nope")
        assert missing.exit_code == 1 and "no such directory" in missing.stderr
        workspace = box.host_workdir
    assert not workspace.exists(), "close() removes the workspace"
    assert (tmp_path / "given.txt").read_text() == "from the template"


async def test_python_with_pytest_is_available(box: BubblewrapSandbox) -> None:
    res = await box.exec("python3 -c 'import pytest, sys; print(sys.version_info[:2] >= (3, 11))'")
    assert res.stdout.strip() == "True", res.stderr


async def test_timeout_kills_the_command_and_reports_it(box: BubblewrapSandbox) -> None:
    # (were the sleeps waited for, pytest's own timeout would end the test: no clock needed here)
    res = await box.exec("sleep 1000 & sleep 1000; echo never", timeout=0.5)
    assert res.timed_out and res.exit_code == 137 and "never" not in res.stdout
    assert (await box.exec("echo alive")).stdout == "alive\n", "the sandbox is still usable"


async def test_exit_by_signal_reads_128_plus_signal(box: BubblewrapSandbox) -> None:
    assert (await box.exec("kill -TERM $$")).exit_code == 128 + 15


@requires_root
async def test_cancelling_an_exec_kills_its_processes(box: BubblewrapSandbox) -> None:
    task = asyncio.create_task(box.exec("sleep 100 & sleep 100 & wait", timeout=60))
    for _ in range(200):
        await asyncio.sleep(0.02)
        if len(processes_of(box.uid)) >= 3:
            break
    assert len(processes_of(box.uid)) >= 3
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await box.kill_all()
    assert processes_of(box.uid) == []


async def test_output_is_capped_with_a_marker(box: BubblewrapSandbox) -> None:
    res = await box.exec("head -c 5000000 /dev/zero | tr '\\0' a; echo; echo END")
    assert res.truncated and res.exit_code == 0
    assert len(res.stdout) < SMALL.output_bytes + 200
    assert "bytes of output omitted" in res.stdout and res.stdout.endswith("END\n")


async def test_stdin_reaches_the_command(box: BubblewrapSandbox) -> None:
    assert (await box.exec("tr a-z A-Z", stdin="hello")).stdout == "HELLO"


async def test_rlimits_are_applied(box: BubblewrapSandbox) -> None:
    limits = (await box.exec("cat /proc/self/limits")).stdout
    rows = {line[:26].strip(): line[26:47].strip() for line in limits.splitlines()[1:]}
    assert rows["Max cpu time"] == str(SMALL.cpu_seconds)
    assert rows["Max address space"] == str(SMALL.address_space_bytes)
    assert rows["Max file size"] == str(SMALL.max_file_bytes)
    assert rows["Max processes"] == str(SMALL.max_processes)


async def test_file_helpers_round_trip(box: BubblewrapSandbox, tmp_path: Path) -> None:
    await box.write_file("d/e/f.txt", "content")
    assert await box.read_file("/app/d/e/f.txt") == b"content"
    with pytest.raises(SandboxFileError, match="cannot read /app/none"):
        await box.read_file("none")
    with pytest.raises(SandboxFileError, match="cannot write /usr/x"):
        await box.write_file("/usr/x", "no")
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "a.txt").write_text("A")
    (src / "b.txt").write_text("B")
    await box.upload(src, "up")
    assert (await box.exec("cat up/sub/a.txt up/b.txt")).stdout == "AB"
    await box.download("up", tmp_path / "back")
    assert (tmp_path / "back" / "sub" / "a.txt").read_text() == "A"


async def test_file_helpers_never_follow_links_on_the_host(box: BubblewrapSandbox) -> None:
    """A link planted in the workspace resolves inside the sandbox, never on the host."""
    await box.exec("ln -s /etc/hostname host_link; ln -s /root/.bashrc rc_link")
    assert (await box.read_file("host_link")).strip() == b"sandbox"
    with pytest.raises(SandboxFileError):
        await box.read_file("rc_link")
    with pytest.raises(SandboxFileError):
        await box.write_file("rc_link", "overwritten?")


async def test_a_command_cannot_fake_a_sandbox_failure(box: BubblewrapSandbox) -> None:
    """Printing bwrap's error format is the command's output, not an infra error."""
    res = await box.exec("echo 'bwrap: Cannot mount proc: fake' >&2; exit 1")
    assert res.exit_code == 1 and "fake" in res.stderr


async def test_a_sandbox_that_cannot_start_raises_infra_error(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    box = await BubblewrapSandbox.create(limits=SMALL)
    try:
        # a mount point inside the read-only /usr cannot be created: bwrap fails before the
        # command starts, which is the infrastructure's failure, not the command's
        with pytest.raises(InfraError, match="bubblewrap could not start"):
            await box.exec("true", mounts=[Mount(tmp_path / "f", "/usr/envlab-x")])
    finally:
        await box.close()


async def test_extra_mounts_and_freezing(tmp_path: Path) -> None:
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "f").write_text("shared")
    box = await BubblewrapSandbox.create(limits=SMALL, mounts=[Mount(tmp_path / "ro", "/data")])
    try:
        assert (await box.exec("cat /data/f")).stdout == "shared"
        assert (await box.exec("echo x > /data/f")).exit_code != 0
        await box.kill_all()
        with pytest.raises(InfraError, match="frozen"):
            await box.exec("true")
    finally:
        await box.close()
    assert (tmp_path / "ro" / "f").read_text() == "shared"


@requires_root
async def test_many_sandboxes_at_once_get_distinct_uids() -> None:
    boxes = await asyncio.gather(*(BubblewrapSandbox.create(limits=SMALL) for _ in range(20)))
    try:
        results = await asyncio.gather(*(b.exec("id -u") for b in boxes))
        assert sorted(int(r.stdout) for r in results) == sorted(b.uid for b in boxes)
        assert len({b.uid for b in boxes}) == 20
    finally:
        await asyncio.gather(*(b.close() for b in boxes))


def test_limits_reject_nonsense() -> None:
    with pytest.raises(ValueError):
        Limits(max_processes=0)
    with pytest.raises(ValueError):
        Limits(unknown=1)  # type: ignore[call-arg]


async def test_cgroup_memory_limit_when_available() -> None:
    from envlab.sandbox.limits import _cgroup_parent

    if os.geteuid() != 0 or _cgroup_parent() is None:
        pytest.skip("no writable cgroup on this host")
    limits = SMALL.model_copy(update={"memory_bytes": 64 << 20, "address_space_bytes": 4 << 30})
    async with await create_sandbox(limits=limits) as box:
        # 4 processes of 40 MB each: every one under its rlimit, together over the cgroup
        one = "python3 -c 'import time; b = b\"x\" * (40 << 20); time.sleep(1); print(1)'"
        res = await box.exec(" & ".join([one] * 4) + " & wait", timeout=30)
        assert not res.timed_out
        assert res.stdout.count("1") < 4, "the cgroup's OOM killer stopped some of them"
        assert (await box.exec("echo ok")).stdout == "ok\n", "still usable after an OOM kill"
