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
from envlab.envs.taskfolder import offline
from envlab.envs.taskfolder.model import TaskFolder
from envlab.envs.taskfolder.reward_file import read_reward_files
from envlab.envs.taskfolder.verifier import LOGS
from envlab.sandbox import ExecResult, Limits, Mount
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

OFFLINE_VERSION = "3"
WHEELS = "/var/cache/envlab/wheels"
"""Where the warm-up leaves wheels for ``pip install`` (in the verifier layer)."""
REPORT = "/opt/envlab/report"
WARM_TIMEOUT = 1800.0


class VerifierPrep:
    """What the verifier of one task in one image adds to it."""

    def __init__(self, layer: Path | None, kit: Path, needs: offline.VerifierNeeds) -> None:
        self.layer, self.kit, self.needs = layer, kit, needs


async def prepare_verifier(task: TaskFolder, image: Image) -> VerifierPrep:
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
    task: TaskFolder, image: Image, needs: offline.VerifierNeeds, kit: Path, final: Path, key: str
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


MOUNTPOINTS = ("tests", "logs/verifier", "opt/envlab/offline", "opt/envlab/report")


def mountpoints() -> Path:
    """A layer of empty directories where the verifier mounts its own, stacked above the
    agent's: whatever the agent left at those paths (a file, a link, nothing), the mounts
    land on directories, so nothing it did turns its grade into a machinery failure."""
    layer = images_root() / "layers" / "envlab-mountpoints" / "upper"
    if not (layer.parent / META).exists():
        for d in MOUNTPOINTS:
            (layer / d).mkdir(parents=True, exist_ok=True)
        meta = LayerMeta(key="envlab-mountpoints", instruction="envlab: mount points")
        (layer.parent / META).write_text(meta.model_dump_json())
    return layer


def verifier_image_env(task: TaskFolder, image: Image) -> dict[str, str]:
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


_SHELLS = ("bash", "sh", "dash", "env")
_PATH_DIRS = ("usr/local/sbin", "usr/local/bin", "usr/sbin", "usr/bin", "sbin", "bin")
_LOADER = ("etc/ld.so.preload", "lib64/ld-linux-x86-64.so.2", "usr/lib64/ld-linux-x86-64.so.2",
           "lib/ld-linux-aarch64.so.1", "usr/lib/ld-linux-aarch64.so.1")  # fmt: skip


def grader_programs_changed(
    agent_layer: Path, path: str = "", image: list[Path] | None = None
) -> list[str]:
    """The programs that run the grade which the agent's layer changed (or removed): the shells
    and ``env`` anywhere on the verifier's PATH (``path`` and Docker's), a directory of that
    PATH (or one above it) turned into a link or a file, ``/etc/ld.so.preload``, the dynamic
    loader. A grade run by a shell the agent wrote would be the agent's to write. Pythons
    count where ``image`` (its layers) has one of that name on its PATH: replaced or shadowed,
    not a new version the agent installed."""
    dirs = {d.strip("/") for d in [*path.split(":"), *_PATH_DIRS] if d.startswith("/")}
    dirs.discard(offline.MOUNT.strip("/") + "/bin")
    found: list[str] = []
    for d in sorted(dirs):
        parts = d.split("/")
        for i in range(1, len(parts) + 1):  # /usr/local/bin: /usr, /usr/local, /usr/local/bin
            p = agent_layer.joinpath(*parts[:i])
            if os.path.lexists(p) and (p.is_symlink() or not p.is_dir()):
                found.append("/" + "/".join(parts[:i]))
        found += [f"/{d}/{n}" for n in _SHELLS if os.path.lexists(agent_layer / d / n)]
        with contextlib.suppress(OSError):
            found += [f"/{d}/{n}" for n in os.listdir(agent_layer / d)
                      if _PYTHON.match(n) and _on_path(image or [], dirs, n)]  # fmt: skip
    found += [f"/{p}" for p in _LOADER if os.path.lexists(agent_layer / p)]
    return sorted(set(found + _startup_hooks(agent_layer)))


_PYTHON = re.compile(r"^python(3(\.\d+)?)?$")


def _on_path(layers: list[Path], dirs: set[str], name: str) -> bool:
    return any(os.path.lexists(layer / d / name) for layer in layers for d in dirs)


_HOOKS = ("sitecustomize.py", "usercustomize.py")


def _startup_hooks(agent_layer: Path) -> list[str]:
    """Python's startup hooks the agent wrote (every python the tests run imports them)."""
    found = []
    for root, _dirs, names in os.walk(agent_layer):
        found += [os.path.join(root, n) for n in names if n in _HOOKS]
    return ["/" + os.path.relpath(f, agent_layer) for f in found]


def _refuse_changed_programs(agent_layer: Path, path: str, image: Image) -> None:
    changed = grader_programs_changed(agent_layer, path, image.lowers)
    if changed:
        raise GraderFailed(
            f"the agent changed the grader's programs ({', '.join(changed)}): the tests would "
            "run under them, so no grade is valid",
            details={"grader_programs_changed": changed, "sandbox_mode": "image"},
        )


async def run_image_verifier(
    task: TaskFolder,
    image: Image,
    agent_layer: Path,
    prep: VerifierPrep,
    *,
    memory_mb: int = 4096,
    network: bool = False,
) -> Reward:
    """Run ``tests/test.sh`` over the image and the agent's frozen layer; the valid reward."""
    _refuse_changed_programs(agent_layer, verifier_image_env(task, image)["PATH"], image)
    timeout = task.config.verifier.timeout_sec
    lowers = [*([prep.layer] if prep.layer else []), agent_layer, mountpoints()]
    storage_mb = task.config.environment.storage_mb
    try:
        box = await ImageSandbox.create(
            image=image, extra_lowers=lowers, network=network, name=f"verifier-{task.name}",
            env=verifier_image_env(task, image),
            limits=Limits(timeout_s=timeout, memory_bytes=memory_mb << 20,
                          **({"storage_bytes": storage_mb << 20} if storage_mb else {})),
        )  # fmt: skip
    except OSError as e:
        raise InfraError(f"could not set up the verifier's sandbox: {e}") from e
    try:
        assert box.storage is not None
        logs, report, tests = box.storage.make("logs", "report", "tests")
        # a copy of the pristine tests, writable as Harbor's are (a test that builds in /tests)
        await asyncio.to_thread(
            shutil.copytree, task.tests_dir, tests, symlinks=True, dirs_exist_ok=True
        )
        mounts = [
            Mount(tests, "/tests", writable=True),
            Mount(prep.kit, offline.MOUNT),
            Mount(logs, LOGS, writable=True),
            Mount(report, REPORT, writable=True),
        ]
        res = await box.exec(["bash", "/tests/test.sh"], timeout=timeout, mounts=mounts)
        return judge_image(res, logs, report / "needs-network.txt", timeout)
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


async def run_shared_verifier(task: TaskFolder, image: Image, box: Any) -> Reward:
    """Harbor's shared mode: ``tests/test.sh`` in the agent's own sandbox, whose processes are
    alive (``SharedImageSandbox``): the pristine tests copied in, the logs wiped first."""
    timeout = task.config.verifier.timeout_sec
    _refuse_changed_programs(box.upper, verifier_image_env(task, image)["PATH"], image)
    for target in ("/tests", LOGS, REPORT):
        await asyncio.to_thread(box.clear, target)
    await asyncio.to_thread(
        shutil.copytree, task.tests_dir, box.shared("/tests"), symlinks=True, dirs_exist_ok=True
    )
    res = await box.exec(
        ["bash", "/tests/test.sh"], timeout=timeout, env=verifier_image_env(task, image)
    )
    report = box.shared(REPORT) / "needs-network.txt"
    try:
        reward = judge_image(res, box.shared(LOGS), report, timeout)
    except GraderFailed as e:
        e.details["verifier_mode"] = "shared"
        raise
    reward.details["verifier_mode"] = "shared"
    return reward


def judge_image(res: ExecResult, logs: Path, report: Path, timeout: float) -> Reward:
    """The valid reward of one run of test.sh in an image, or ``GraderFailed`` saying why."""
    details: dict[str, Any] = {
        "verifier_exit_code": None if res.timed_out else res.exit_code,
        "verifier_duration_s": round(res.duration_s, 3),
        "verifier_output_tail": (res.stdout[-3000:] + "\n" + res.stderr[-3000:]).strip(),
        "sandbox_mode": "image",
    }
    needs = offline.read_needs_network(report)
    total: float | None = None
    why = ""
    if not res.timed_out and not needs:
        try:
            total, components = read_reward_files(logs)
        except GraderFailed as e:
            why = str(e)
    if not needs and (total is None or total <= 0):
        # a fetch that went past the shims (pip, uv, a library in the tests) and failed: a
        # grade stands only where the tests passed anyway
        needs = offline_misses(res.stdout + "\n" + res.stderr)
    if needs:
        details["needs_network"] = needs
        why = f"needs the network ({', '.join(needs[:5])}): grading is offline"
    elif res.timed_out:
        why = f"the verifier (tests/test.sh) ran past [verifier] timeout_sec = {timeout:g}s"
    elif total is not None:
        return Reward(total=total, components=components, details=details)
    tail = str(details["verifier_output_tail"])[-1500:]
    raise GraderFailed(
        f"{why} (test.sh exit code {details['verifier_exit_code']}). Output tail:\n{tail}",
        details=details,
    )
