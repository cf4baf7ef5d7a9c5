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
import errno
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from envlab.core.errors import GraderFailed, InfraError
from envlab.core.rubric import Reward
from envlab.sandbox import Limits, Mount, verifier_kit
from envlab.sandbox.image.persistent import PRIVATE_LOGS, VERIFIER_CGROUP
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
from envlab.sandbox.limits import STORAGE_BYTES
from envlab.sandbox.tasks import offline
from envlab.sandbox.tasks.carry import ARTIFACTS, carry
from envlab.sandbox.tasks.source import TaskSource
from envlab.sandbox.tasks.verifier import HOST_ERRNOS, LOGS, GradeDetails, run_tests

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
    layer = images_root() / "layers" / "envlab-mountpoints-3" / "upper"
    if not (layer.parent / META).exists():
        for d in MOUNTPOINTS:
            (layer / d).mkdir(parents=True, exist_ok=True)
        (layer / verifier_kit.EVENTS.lstrip("/")).touch()  # a file: the events FIFO's
        meta = LayerMeta(key="envlab-mountpoints-3", instruction="envlab: mount points")
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


def _host_full(path: Path) -> bool:
    """Whether the host's filesystem under ``path`` is (nearly) out of space."""
    try:
        vfs = os.statvfs(path)
    except OSError:
        return True
    return vfs.f_bavail * vfs.f_frsize < 64 << 20


def _verifier_storage(storage_mb: int | None) -> int:
    """The verifier's bounded storage: room for the carried workspace (at most what bounded
    the agent's own writes) and as much again for the verifier's writes, so that an agent that
    filled its storage cannot make carrying it fail for want of space (an ``InfraError``)."""
    agent = (storage_mb << 20) if storage_mb else STORAGE_BYTES
    return 2 * agent + (64 << 20)


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
                          storage_bytes=_verifier_storage(storage_mb)),
            extra_lowers=[*([prep.layer] if prep.layer else [])],
        )  # fmt: skip
    except OSError as e:
        raise InfraError(f"could not set up the verifier's sandbox: {e}") from e
    try:
        assert box.storage is not None
        carried, logs, report, tests = box.storage.make("carried", "logs", "report", "tests")
        try:
            dropped = await asyncio.to_thread(
                carry, agent_layer, carried, [workspace_of(image), ARTIFACTS], image.lowers
            )
        except OSError as e:
            # the verifier's storage holds twice what the agent could write: out of space there,
            # with the host's disk not full, is the agent's content growing as it is carried
            grew = e.errno in (errno.ENOSPC, errno.EDQUOT) and not _host_full(box.storage.root)
            if e.errno in HOST_ERRNOS and not grew:
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
        return await run_tests(
            box, ["sh", f"{verifier_kit.IMAGE_KIT}/report.sh"], timeout=timeout, logs=logs,
            events=report / "events", mounts=mounts,
            needs_network=report / "needs-network.txt",
            details=GradeDetails(sandbox_mode="image", not_carried=dropped[:200]),
        )  # fmt: skip
    finally:
        await box.close()


async def run_shared_verifier(task: TaskSource, image: Image, box: Any) -> Reward:
    """Harbor's shared mode: ``tests/test.sh`` in the agent's own sandbox, whose processes are
    alive (``SharedImageSandbox``), the pristine tests copied in (read-only to the agent). The
    verifier sees the agent's processes but they cannot reach into it (``PRIVATE_LOGS``): its
    ``/logs/verifier`` is private, and its reward comes back on the reporting process's last
    line; what outlived test.sh in the verifier's own cgroup makes the grade invalid."""
    for target in ("/tests", LOGS, REPORT):
        await asyncio.to_thread(box.clear, target)
    await asyncio.to_thread(
        shutil.copytree, task.tests_dir, box.shared("/tests"), symlinks=True, dirs_exist_ok=True
    )
    env = verifier_image_env(task, image)
    env |= verifier_kit.image_kit_env(env)
    env |= {PRIVATE_LOGS: LOGS, "ENVLAB_EVENTS": f"{REPORT}/events"}
    env[VERIFIER_CGROUP] = f"envlab-verifier-{uuid.uuid4().hex[:12]}"
    report, timeout = box.shared(REPORT), task.config.verifier.timeout_sec
    logs = scratch("shared-logs")
    try:
        return await run_tests(
            box, ["sh", f"{verifier_kit.IMAGE_KIT}/report.sh"], timeout=timeout, logs=logs,
            events=report / "events", env=env, needs_network=report / "needs-network.txt",
            details=GradeDetails(sandbox_mode="image", verifier_mode="shared"),
        )  # fmt: skip
    finally:
        await asyncio.to_thread(remove_tree, logs)
