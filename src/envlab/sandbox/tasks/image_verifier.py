"""Grading a task that ran in an image: its own tests, in the image, with the network off.

The verifier's root is the image, then the *verifier layer* (the caches test.sh's bootstrap
needs: apt's package lists and archives, uv's cache, wheels; filled while building, with the
network), then the agent's frozen layer (read-only: its processes are dead), then a fresh layer
of the verifier's own. ``/tests`` (the pristine tests) and the offline kit
(``/opt/envlab/offline``: uv and shims for ``curl``/``wget`` that serve uv's installer from the
cache) are mounted read-only; ``/logs/verifier`` is on the verifier's storage.

A valid grade: test.sh ended on its own within its timeout, and the reward files hold finite
numbers. A fetch the cache could not serve makes the grade ``grader_failed: needs the network
(URL)``. The PID namespace ends with test.sh, so nothing it started outlives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
from pathlib import Path
from typing import Any

from envlab.core.errors import GraderFailed, InfraError
from envlab.core.rubric import Reward
from envlab.sandbox import ExecResult, Limits, Mount, verifier_kit
from envlab.sandbox.image.runner import host_network_trust
from envlab.sandbox.image.sandbox import ImageSandbox
from envlab.sandbox.image.store import (
    META,
    Image,
    LayerMeta,
    alocked,
    commit,
    content_key,
    images_root,
    locked,
    remove_tree,
    scratch,
)
from envlab.sandbox.tasks import offline
from envlab.sandbox.tasks.carry import ARTIFACTS, carry
from envlab.sandbox.tasks.host_verifier import _HOST_ERRNOS, LOGS
from envlab.sandbox.tasks.reward_file import read_reward_files, read_small
from envlab.sandbox.tasks.source import TaskSource

OFFLINE_VERSION = "3"
WHEELS = "/var/cache/envlab/wheels"
"""Where the warm-up leaves wheels for ``pip install`` (in the verifier layer)."""
REPORT = "/opt/envlab/report"
WARM_TIMEOUT = 1800.0


class VerifierPrep:
    """What the verifier of one task in one image adds to it."""

    def __init__(self, layer: Path | None, kit: Path, needs: offline.VerifierNeeds) -> None:
        self.layer, self.kit, self.needs = layer, kit, needs


async def prepare_verifier(task: TaskSource, image: Image) -> VerifierPrep:
    """Scan the tests for what they fetch, fetch it (uv from PyPI, the rest inside the image
    with the network) into a cached layer, and write the offline kit."""
    needs = await asyncio.to_thread(offline.scan_needs, task.tests_dir, task.tests_dir / "test.sh")
    key = content_key(OFFLINE_VERSION, image.key, needs.model_dump(mode="json"))
    root = images_root() / "offline" / key
    if not (root / "kit.done").exists():
        await asyncio.to_thread(_write_kit, root, needs)
    final = images_root() / "layers" / f"verifier-{key}"
    if not _wants_warmup(needs):
        return VerifierPrep(None, root / "kit", needs)
    if not (final / META).exists():
        await _warm(task, image, needs, root / "kit", final, key)
    return VerifierPrep(final / "upper", root / "kit", needs)


def _wants_warmup(needs: offline.VerifierNeeds) -> bool:
    return bool(needs.apt_packages or needs.uv_requirements or needs.pip_requirements)


def uv_versions(needs: offline.VerifierNeeds) -> list[str]:
    versions = list(needs.uv_versions)
    if not versions and (needs.uv_requirements or needs.uses_uv):
        versions = ["latest"]
    return versions


def _write_kit(root: Path, needs: offline.VerifierNeeds) -> None:
    with locked(f"kit-{root.name}"):
        if (root / "kit.done").exists():
            return
        root.mkdir(parents=True, exist_ok=True)
        cache = images_root() / "uv"
        uv = {v: offline.fetch_uv(v, cache) for v in uv_versions(needs)}
        if (root / "kit").exists():
            remove_tree(root / "kit")
        offline.write_offline_kit(root / "kit", uv)
        (root / "kit.done").touch()


async def _warm(
    task: TaskSource, image: Image, needs: offline.VerifierNeeds, kit: Path, final: Path, key: str
) -> None:
    async with alocked(f"verifier-{key}"):
        if (final / META).exists():
            return
        tmp = scratch("verifier")
        (tmp / "upper").mkdir()
        (tmp / "work").mkdir()
        versions = uv_versions(needs)
        script = offline.warmup_script(
            needs,
            versions[0] if versions else "latest",
            wheels_dir=WHEELS,
            workdir=image.config.workdir if image.config.workdir != "/" else "",
        )
        box = await ImageSandbox.create(
            image=image, upper=(tmp / "upper", tmp / "work"), network=True, user="root",
            mounts=[Mount(kit, offline.MOUNT), *_host_resolver()], name="warm",
            limits=Limits(memory_bytes=4 << 30, timeout_s=WARM_TIMEOUT),
        )  # fmt: skip
        try:
            res = await box.exec(["bash", "-c", script], timeout=WARM_TIMEOUT)
        finally:
            await box.close()
        if res.timed_out:
            remove_tree(tmp)
            raise InfraError(f"filling the verifier's caches for {task.name} timed out")
        remove_tree(tmp / "work")
        for sub in ("tmp", "var/tmp"):  # the warm-up's scratch is not part of the layer
            with contextlib.suppress(OSError):
                shutil.rmtree(tmp / "upper" / sub)
        meta = LayerMeta(
            key=key, instruction=f"verifier caches of {task.name}: {res.stdout[-300:]}"
        )
        (tmp / META).write_text(meta.model_dump_json(indent=1))
        commit(tmp, final)


def _host_resolver() -> list[Mount]:
    """The host's name lookup for the warm-up: envlab fetching, not the task's code, so an
    image whose own network settings are broken on purpose (a task to fix them) still gets its
    caches."""
    path = Path("/etc/nsswitch.conf")
    return [Mount(path, str(path))] if path.is_file() else []


MOUNTPOINTS = (
    "tests",
    "logs/verifier",
    "opt/envlab/offline",
    "opt/envlab/report",
    "opt/envlab/grade",
)


def mountpoints() -> Path:
    """A layer of empty directories where the verifier mounts its own, stacked above the
    agent's: whatever the agent left at those paths (a file, a link, nothing), the mounts
    land on directories, so nothing it did turns its grade into a machinery failure."""
    layer = images_root() / "layers" / "envlab-mountpoints-2" / "upper"
    if not (layer.parent / META).exists():
        for d in MOUNTPOINTS:
            (layer / d).mkdir(parents=True, exist_ok=True)
        meta = LayerMeta(key="envlab-mountpoints-2", instruction="envlab: mount points")
        (layer.parent / META).write_text(meta.model_dump_json())
    return layer


def verifier_image_env(task: TaskSource, image: Image) -> dict[str, str]:
    env = {**image.config.env, **task.config.environment.env, **task.config.verifier.env}
    env.update(offline.offline_env())
    env["PATH"] = offline.offline_path(env.get("PATH", "/usr/local/bin:/usr/bin:/bin"))
    env["PIP_FIND_LINKS"] = WHEELS
    # neither uv nor pip reads a config file: the agent may have written one anywhere
    env |= {"UV_NO_CONFIG": "1", "PIP_CONFIG_FILE": os.devnull}
    # uv's cache is keyed by index: offline, it must look under the index the warm-up used
    # (the host's mirror, if any); nothing connects to it
    env |= {k: v for k, v in host_network_trust()[1].items() if "INDEX" in k}
    env["TEST_DIR"] = "/tests"
    env["ENVLAB_OFFLINE_REPORT"] = f"{REPORT}/needs-network.txt"
    return env


def workspace_of(image: Image) -> str:
    """The agent's workspace, what the separate mode carries: the image's ``WORKDIR``
    (``/app`` where the image sets none or ``/``)."""
    workdir = image.config.workdir.rstrip("/")
    return workdir if workdir else "/app"


async def run_image_verifier(
    task: TaskSource,
    image: Image,
    agent_layer: Path,
    prep: VerifierPrep,
    *,
    memory_mb: int = 4096,
    network: bool = False,
) -> Reward:
    """Harbor's ``separate`` mode: ``tests/test.sh`` in a fresh sandbox of the pristine image
    (with its verifier layer), into which only the agent's workspace and artifacts are carried
    (scrubbed); the valid reward."""
    timeout = task.config.verifier.timeout_sec
    storage_mb = task.config.environment.storage_mb
    env = verifier_image_env(task, image)
    env |= verifier_kit.image_kit_env(env)
    try:
        kit = await asyncio.to_thread(verifier_kit.image_kit_dir)
        box = await ImageSandbox.create(
            image=image, network=network, name=f"verifier-{task.name}", env=env,
            limits=Limits(timeout_s=timeout, memory_bytes=memory_mb << 20,
                          **({"storage_bytes": storage_mb << 20} if storage_mb else {})),
            extra_lowers=[*([prep.layer] if prep.layer else [])],
        )  # fmt: skip
    except OSError as e:
        raise InfraError(f"could not set up the verifier's sandbox: {e}") from e
    try:
        assert box.storage is not None
        carried, logs, report, tests = box.storage.make("carried", "logs", "report", "tests")
        try:
            dropped = await asyncio.to_thread(
                carry, agent_layer, carried, [workspace_of(image), ARTIFACTS]
            )
        except OSError as e:
            if e.errno in _HOST_ERRNOS:
                raise InfraError(f"could not carry the workspace to the verifier: {e}") from e
            raise GraderFailed(f"the agent's workspace could not be carried: {e}") from e
        box.add_lowers([carried, mountpoints()])
        await asyncio.to_thread(
            shutil.copytree, task.tests_dir, tests, symlinks=True, dirs_exist_ok=True
        )
        mounts = [
            Mount(tests, "/tests", writable=True),
            Mount(prep.kit, offline.MOUNT),
            Mount(kit, verifier_kit.IMAGE_KIT),
            Mount(logs, LOGS, writable=True),
            Mount(report, REPORT, writable=True),
        ]
        res = await box.exec(
            ["sh", f"{verifier_kit.IMAGE_KIT}/report.sh"], timeout=timeout, mounts=mounts
        )
        reward = judge_image(res, logs, report, timeout, mode="separate")
        reward.details["not_carried"] = dropped[:200]
        return reward
    finally:
        await box.close()


_MISSES = (
    (re.compile(r"No matching distribution found for ([\w.\-\[\],=<>!~]+)"), "pip: {}"),
    (re.compile(r"Because ([\w.\-\[\]]+) was not found in the cache"), "uv: {}"),
    (re.compile(r"Failed to fetch: `(\S+)`"), "{}"),
    (re.compile(r"Could not resolve host:? '?([\w.-]+)"), "https://{}"),
    (re.compile(r"(?:getaddrinfo|resolve|connect)[^\n]*?(?:host|to) '?([\w-]+\.[\w.-]+)"), "{}"),
)
_APT_NOISE = ("Err:", "W:", "Ign:", "E: Failed to fetch", "E: Some index files")


def offline_misses(output: str) -> list[str]:
    """What the tests tried to fetch and could not, read off their output (pip's, uv's, curl's
    and resolvers' messages); apt's failed index updates are expected offline and ignored."""
    found: list[str] = []
    for line in output.splitlines():
        if line.lstrip().startswith(_APT_NOISE):
            continue
        for pattern, form in _MISSES:
            for m in pattern.finditer(line):
                what = form.format(m.group(1).rstrip("`'\".,:"))
                if what not in found:
                    found.append(what)
    return found[:20]


async def run_shared_verifier(task: TaskSource, image: Image, box: Any) -> Reward:
    """Harbor's shared mode: ``tests/test.sh`` in the agent's own sandbox, whose processes are
    alive (``SharedImageSandbox``): the pristine tests copied in, the logs wiped first."""
    timeout = task.config.verifier.timeout_sec
    for target in ("/tests", LOGS, REPORT):
        await asyncio.to_thread(box.clear, target)
    await asyncio.to_thread(
        shutil.copytree, task.tests_dir, box.shared("/tests"), symlinks=True, dirs_exist_ok=True
    )
    env = verifier_image_env(task, image)
    env |= verifier_kit.image_kit_env(env) | {"ENVLAB_KEEP_OTHERS": "1"}
    res = await box.exec(["sh", f"{verifier_kit.IMAGE_KIT}/report.sh"], timeout=timeout, env=env)
    return judge_image(res, box.shared(LOGS), box.shared(REPORT), timeout, mode="shared")


def _report_line(res: ExecResult) -> tuple[tuple[int, int] | None, str]:
    """``(test.sh's status, processes that outlived it)`` from the reporting process's last
    line, if it ended on its own; and the output before that line."""
    if res.exit_code != 0 or res.timed_out:
        return None, res.stdout
    out, sep, line = res.stdout.rstrip("\n").rpartition("\n" + verifier_kit.END)
    fields = line.split()
    if not sep or len(fields) != 2 or not all(f.isdigit() for f in fields):
        return None, res.stdout
    return (int(fields[0]), int(fields[1])), out


def _events(report: Path) -> tuple[list[str], list[str]]:
    """pytest sessions that started and never finished; programs reported missing."""
    text = read_small(report / "events") or ""
    started, finished, missing = set(), set(), []
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        pid = rest.split(" ")[0]
        if kind == "start":
            started.add(pid)
        elif kind == "finish":
            finished.add(pid)
        elif kind == "missing" and rest and rest not in missing:
            missing.append(rest[:100])
    return sorted(started - finished), missing[:20]


_NO_PYTEST = re.compile(r"No module named '?pytest'?|pytest: (command )?not found")


def _invalid(ended: tuple[int, int] | None, res: ExecResult, unfinished: list[str]) -> str:
    """Why the run cannot give a valid grade, or "" when it can."""
    if res.timed_out:
        return ""  # said below, with the timeout
    if ended is None:
        return (
            f"the verifier was killed before it finished (exit {res.exit_code}): something in "
            "the sandbox killed its reporting process"
        )
    status, left = ended
    if status > 128:
        return f"tests/test.sh was killed by signal {status - 128}"
    if left:
        return (
            f"{left} process(es) started by the tests were still running when tests/test.sh "
            "ended (they could rewrite the reward); the tests must stop them"
        )
    if unfinished:
        return (
            "a pytest session ended before it finished (os._exit or a kill in the code under "
            "test), whatever exit code it left"
        )
    return ""


def judge_image(
    res: ExecResult, logs: Path, report: Path, timeout: float, *, mode: str = "separate"
) -> Reward:
    """The valid reward of one run of test.sh in an image, or ``GraderFailed`` saying why."""
    ended, out = _report_line(res)
    details: dict[str, Any] = {
        "verifier_exit_code": ended[0] if ended else None,
        "verifier_duration_s": round(res.duration_s, 3),
        "verifier_output_tail": (out[-3000:] + "\n" + res.stderr[-3000:]).strip(),
        "sandbox_mode": "image",
        "verifier_mode": mode,
    }
    unfinished, missing = _events(report)
    needs = offline.read_needs_network(report / "needs-network.txt")
    why = _invalid(ended, res, unfinished)
    total: float | None = None
    read_error = ""
    if not why and not res.timed_out and not needs:
        try:
            total, components = read_reward_files(logs)
        except GraderFailed as e:
            read_error = str(e)
    if not why and not needs and (total is None or total <= 0):
        # a fetch that went past the shims (pip, uv, a library in the tests) and failed: a
        # grade stands only where the tests passed anyway
        needs = offline_misses(res.stdout + "\n" + res.stderr)
        if _NO_PYTEST.search(res.stdout + "\n" + res.stderr) and "pytest" not in missing:
            missing.append("pytest")
    if needs:
        details["needs_network"] = needs
        why = f"needs the network ({', '.join(needs[:5])}): grading is offline"
    elif res.timed_out:
        why = f"the verifier (tests/test.sh) ran past [verifier] timeout_sec = {timeout:g}s"
    elif not why and missing and (total is None or total <= 0):
        details["missing_tools"] = missing
        why = f"the verifier needs {', '.join(missing)}, not installed in the image"
    elif not why and total is not None:
        return Reward(total=total, components=components, details=details)
    why = why or read_error
    tail = str(details["verifier_output_tail"])[-1500:]
    raise GraderFailed(
        f"{why} (test.sh exit code {details['verifier_exit_code']}). Output tail:\n{tail}",
        details=details,
    )
