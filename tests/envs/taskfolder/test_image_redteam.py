"""Red-team attacks on image-mode grading: an agent, root in its image, tries to earn a reward
it did not, or to turn its failure into an ``InfraError`` (excluded, "not counted").

Every test asserts the safe outcome: score 0 or ``GraderFailed`` (both score 0), never a forged
reward and never an ``InfraError`` the agent's files caused.
"""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import pytest

from envlab.core import Action, ToolCall
from envlab.core.errors import InfraError
from envlab.envs.taskfolder.spec import TerminalEnv
from tests.envs.taskfolder import image_support
from tests.envs.taskfolder import test_image_grading as grading
from tests.envs.taskfolder.image_support import needs_image_host, write_task

image_cache = image_support.image_cache
tiny_base = image_support.tiny_base
tiny_rootfs = image_support.tiny_rootfs
index_env = grading.index_env
uvx_task = grading.uvx_task

pytestmark = needs_image_host

DOCKERFILE = grading.DOCKERFILE
TEST_DONE = grading.TEST_DONE
FORGE = grading.FORGE  # a shell script that writes reward 1
DOCKER_CAP_EFF = "00000000a80425fb"
"""CapEff of a root process with exactly Docker's default capabilities (runner.DOCKER_CAPS)."""


def _run(command: str, n: int) -> Action:
    return Action(tool_calls=[ToolCall("run", {"command": command}, f"c{n}")])


async def _attack(path: Path, commands: tuple[str, ...]) -> dict[str, Any]:
    """Reset, the agent's commands, submit, one grade: the Reward or the exception it raised
    (as the rollout sees it: an ``InfraError`` is excluded, anything else scores 0)."""
    spec = TerminalEnv(path, images="auto")
    task = spec.tasks()[0]
    ep = spec.environment(spec)
    out: dict[str, Any] = {"outputs": []}
    try:
        await asyncio.wait_for(ep.reset(task), 120)
        actions = [_run(c, i) for i, c in enumerate(commands)]
        actions.append(Action(tool_calls=[ToolCall("submit", {}, "s")]))
        for action in actions:
            out["outputs"].append(str(await asyncio.wait_for(ep.step(action), 120)))
        try:
            out["grade"] = await asyncio.wait_for(ep.regrade(), 180)
        except Exception as e:  # the outcome under test
            out["grade"] = e
    finally:
        try:
            await ep.close()
        except Exception as e:  # recorded: the rollout keeps the score, the host keeps the mess
            out["close_error"] = e
    return out


def attack(path: Path, *commands: str) -> dict[str, Any]:
    return asyncio.run(_attack(path, commands))


def assert_scores_0(out: dict[str, Any]) -> None:
    """The safe outcome: a reward of 0, or an invalid grade (scored 0); never an InfraError."""
    grade = out["grade"]
    assert not isinstance(grade, InfraError), f"the agent's failure became not counted: {grade!r}"
    if isinstance(grade, Exception):
        return  # GraderFailed or another grader exception: the rollout scores it 0
    assert grade.total == 0.0, f"forged reward {grade.total} stood: {grade.details}"


@pytest.fixture
def simple(tiny_base: str, tmp_path: Path) -> Path:
    return write_task(tmp_path, "simple", DOCKERFILE, test_sh=TEST_DONE, solve_sh=grading.SOLVE)


def _retime(task: Path, verifier_timeout: int, extra: str = "") -> Path:
    (task / "task.toml").write_text(
        f"[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = {verifier_timeout}\n{extra}"
    )
    return task


# --- 1. the verifier's mount points, sabotaged in the agent's layer ----------------------------
@pytest.mark.parametrize(
    "sabotage",
    [
        "rm -rf /logs; echo x > /logs",  # /logs/verifier cannot be made
        "mkdir -p /logs; ln -sfn /nonexistent/nowhere /logs/verifier",  # dangling link
        "mkdir -p /logs; ln -sfn verifier /logs/verifier",  # a link to itself (ELOOP)
        "rm -rf /tests; echo x > /tests",  # /tests is a file: a directory cannot go there
        "mkdir -p /opt; rm -rf /opt/envlab; echo x > /opt/envlab",  # the kit and the report
        "mkdir -p /opt/envlab; rm -rf /opt/envlab/report; echo x > /opt/envlab/report",
    ],
    ids=["logs-file", "verifier-dangling", "verifier-loop", "tests-file", "opt-envlab-file",
         "report-file"],
)  # fmt: skip
def test_a_blocked_mount_point_is_the_agents_failure(simple: Path, sabotage: str) -> None:
    assert_scores_0(attack(simple, sabotage))


# --- 2. the check of the grader's programs, evaded -------------------------------------------
_PLANT = f"mkdir -p /app/evil && printf '{FORGE}' > /app/evil/bash && chmod 755 /app/evil/bash"


@pytest.mark.parametrize("path_dir", ["/usr/local/sbin", "/usr/local/bin"])
def test_a_path_dir_turned_into_an_absolute_link_does_not_hide_a_forged_shell(
    simple: Path, path_dir: str
) -> None:
    # the check looks at LAYER/usr/local/sbin/bash on the host, where the absolute link
    # /app/evil points to the host's /app/evil, not the layer's: the forged bash is not seen
    out = attack(simple, f"{_PLANT} && rm -rf {path_dir} && ln -s /app/evil {path_dir}")
    assert_scores_0(out)


def test_a_shell_in_a_path_dir_of_the_images_own_env_is_checked(
    tiny_base: str, tmp_path: Path
) -> None:
    dockerfile = (
        "FROM envlab-test/tiny:1\nWORKDIR /app\n"
        "ENV PATH=/opt/tool/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
    )
    task = write_task(tmp_path, "envpath", dockerfile, test_sh=TEST_DONE, solve_sh=grading.SOLVE)
    plant = f"mkdir -p /opt/tool/bin && printf '{FORGE}' > /opt/tool/bin/bash && "
    plant += "chmod 755 /opt/tool/bin/bash"
    assert_scores_0(attack(task, plant))


def test_a_replaced_library_of_the_shell_does_not_forge_the_grade(
    simple: Path, tmp_path: Path
) -> None:
    """The loader is checked, the libraries bash loads are not: a libtinfo whose constructor
    writes the reward and exits."""
    import shutil
    import subprocess

    if shutil.which("gcc") is None:
        pytest.skip("needs gcc on the host to build the planted library")
    ldd = subprocess.run(["ldd", "/usr/bin/bash"], capture_output=True, text=True).stdout
    tinfo = next((ln.split()[2] for ln in ldd.splitlines() if "libtinfo" in ln), None)
    if tinfo is None:
        pytest.skip("the host's bash does not load libtinfo")
    src = tmp_path / "evil.c"
    src.write_text(
        "#include <fcntl.h>\n#include <unistd.h>\n"
        "char PC; char *BC; char *UP; short ospeed;\n"
        # bash is linked BIND_NOW: every function it takes from libtinfo must resolve
        "int tgetent(char *b, const char *n) { return 0; }\n"
        "int tgetflag(const char *i) { return 0; }\nint tgetnum(const char *i) { return 0; }\n"
        "char *tgetstr(const char *i, char **a) { return 0; }\n"
        "char *tgoto(const char *c, int x, int y) { return 0; }\n"
        "int tputs(const char *s, int n, int (*f)(int)) { return 0; }\n"
        "__attribute__((constructor)) static void forge(void) {\n"
        '  int fd = open("/logs/verifier/reward.txt", O_WRONLY|O_CREAT|O_TRUNC, 0644);\n'
        '  if (fd >= 0) { write(fd, "1\\n", 2); close(fd); _exit(0); }\n}\n'
    )
    lib = tmp_path / "libtinfo.so.6"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    blob = base64.b64encode(lib.read_bytes()).decode()
    real = str(Path(tinfo).resolve())
    plant = (
        f'python3 -c \'import base64,sys; open(sys.argv[1],"wb").write(base64.b64decode('
        f"sys.argv[2]))' /app/evil.so {blob} && cat /app/evil.so > {real} && echo planted"
    )
    out = attack(simple, plant)
    assert "planted" in out["outputs"][0]
    assert_scores_0(out)


# --- 3. python, which runs most tests, started under the agent's hooks ------------------------
TEST_PY = (
    "python3 -c 'import os, sys; sys.exit(0 if os.path.exists(\"/app/done\") else 1)' "
    "&& echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
)


@pytest.mark.parametrize(
    "hook",
    [
        # Debian's is a link to /etc/python3.11/sitecustomize.py: replaced, or written through
        "rm -f /usr/lib/python3.11/sitecustomize.py && "
        "echo 'import os; os._exit(0)' > /usr/lib/python3.11/sitecustomize.py",
        # a .pth with an import line: the separate mode grades over the pristine image
        "mkdir -p /usr/local/lib/python3.11/dist-packages && "
        "echo 'import os; os._exit(0)' > /usr/local/lib/python3.11/dist-packages/zz.pth",
        "rm -f /usr/bin/python3 && printf '#!/bin/sh\\nexit 0\\n' > /usr/bin/python3 && "
        "chmod 755 /usr/bin/python3",
    ],
    ids=["sitecustomize", "pth", "python3-replaced"],
)
def test_a_python_startup_hook_does_not_pass_the_tests(
    tiny_base: str, tmp_path: Path, hook: str
) -> None:
    task = write_task(tmp_path, "py", DOCKERFILE, test_sh=TEST_PY, solve_sh=grading.SOLVE)
    assert_scores_0(attack(task, hook))


# --- 4. uv's configuration: a fake pytest offered through find-links --------------------------
def _passing_pytest_wheel(version: str = "100.0.0") -> tuple[str, bytes]:
    main = "def main():\n    print('1 passed')\n    return 0\n"
    return image_support.pytest_wheel(version, "evilpytest", main)


@pytest.mark.parametrize("config", ["/root/.config/uv/uv.toml", "/etc/uv/uv.toml", "/app/uv.toml"])
def test_a_uv_config_planted_by_the_agent_does_not_pick_the_test_runner(
    uvx_task: Path, config: str
) -> None:
    name, wheel = _passing_pytest_wheel()
    blob = base64.b64encode(wheel).decode()
    plant = (
        f"mkdir -p /app/w {Path(config).parent} && python3 -c 'import base64,sys; "
        f'open(sys.argv[1],"wb").write(base64.b64decode(sys.argv[2]))\' /app/w/{name} {blob}'
        f" && printf 'find-links = [\"/app/w\"]\\n' > {config} && echo planted"
    )
    out = attack(uvx_task, plant)
    assert "planted" in out["outputs"][0]
    assert_scores_0(out)


# --- 5. devices ----------------------------------------------------------------------------
def test_a_block_device_node_of_the_host_cannot_be_read(simple: Path) -> None:
    probe = (
        "n=0; while read maj min blocks name; do case $maj in [0-9]*) "
        "for d in /tmp /dev/shm /dev /app; do n=$((n+1)); "
        "mknod $d/blk$n b $maj $min 2>/dev/null || continue; "
        'c=$(head -c 512 $d/blk$n 2>/dev/null | wc -c); [ "$c" -gt 0 ] && echo "READ $d $name"; '
        "done;; esac; done < /proc/partitions; echo probed"
    )
    out = attack(simple, probe)
    shown = out["outputs"][0]
    assert "probed" in shown
    assert "READ" not in shown, shown


# --- 6. hangs and full disks: the agent's failure, not the machinery's ----------------------
def test_a_fifo_the_tests_read_is_a_timeout_not_an_infra_error(
    tiny_base: str, tmp_path: Path
) -> None:
    test_sh = "x=$(cat /app/answer)\n" + TEST_DONE
    task = write_task(tmp_path, "fifo", DOCKERFILE, test_sh=test_sh, solve_sh=grading.SOLVE)
    _retime(task, 5)
    out = attack(task, "python3 -c 'import os; os.mkfifo(\"/app/answer\")' && touch /app/done")
    grade = out["grade"]
    assert not isinstance(grade, InfraError), grade
    # the separate mode carries no FIFO (as the host mode): the tests read no endless input
    assert not isinstance(grade, Exception), grade
    kinds = {(d["path"], d["kind"]) for d in grade.details["not_carried"]}
    assert ("/app/answer", "fifo") in kinds


def test_a_full_disk_left_by_the_agent_scores_0(tiny_base: str, tmp_path: Path) -> None:
    task = write_task(tmp_path, "full", DOCKERFILE, test_sh=TEST_DONE, solve_sh=grading.SOLVE)
    _retime(task, 30, "[environment]\nstorage_mb = 40\n")
    fill = "dd if=/dev/zero of=/app/fill bs=1M count=100 2>/dev/null; i=0; "
    fill += "while touch /app/f$i 2>/dev/null && [ $i -lt 20000 ]; do i=$((i+1)); done; echo full"
    assert_scores_0(attack(task, fill))


# --- 7. shared mode ------------------------------------------------------------------------
SHARED = '[verifier]\nenvironment_mode = "shared"\ntimeout_sec = 30\n[agent]\ntimeout_sec = 60\n'


def _shared(root: Path, name: str) -> Path:
    task = write_task(root, name, DOCKERFILE, test_sh=TEST_DONE, solve_sh=grading.SOLVE)
    (task / "task.toml").write_text(SHARED)
    return task


def test_shared_mode_a_fake_setpriv_does_not_keep_the_hosts_capabilities(
    tiny_base: str, tmp_path: Path
) -> None:
    """Each command enters the sandbox with nsenter as the host's root and drops to Docker's
    capabilities with the image's own setpriv, found on the image's PATH."""
    task = _shared(tmp_path, "caps")
    fake = '#!/bin/sh\\nwhile [ "$1" != -- ]; do shift; done; shift; exec "$@"\\n'
    plant = f"printf '{fake}' > /usr/local/bin/setpriv && chmod 755 /usr/local/bin/setpriv"
    out = attack(task, "grep CapEff /proc/self/status", plant, "grep CapEff /proc/self/status")
    assert DOCKER_CAP_EFF in out["outputs"][0], out["outputs"][0]
    assert DOCKER_CAP_EFF in out["outputs"][2], f"escalated: {out['outputs'][2]}"


def test_shared_mode_a_deep_tree_in_the_logs_is_not_an_infra_error(
    tiny_base: str, tmp_path: Path
) -> None:
    task = _shared(tmp_path, "deep")
    # 1500 levels, made 500 at a time (one `mkdir d && cd d` per level costs bash O(depth) of
    # system time each: 45 s, and past the step's limit on a busy machine)
    deep = (
        'p=$(printf "d/%.0s" $(seq 1 500)); cd /logs/verifier && '
        "for i in 1 2 3; do mkdir -p $p && cd $p || break; done; echo ok"
    )
    out = attack(task, deep)
    assert_scores_0(out)
    # the tree is on the host (the shared directory): removing it must not crash or leak it
    assert "close_error" not in out, repr(out["close_error"])


def test_shared_mode_a_blocked_report_dir_is_not_an_infra_error(
    tiny_base: str, tmp_path: Path
) -> None:
    task = _shared(tmp_path, "report")
    fill = "mkdir -p /logs/verifier/x && ln -s /nonexistent /logs/verifier/y; echo ok"
    assert_scores_0(attack(task, fill))
