"""Which mode a task folder runs in, and an episode's reset and grade in its image.

``image``: the task's Dockerfile is built into an image (``image_build``), the agent's commands
run over a fresh overlay of it, the tests over the agent's frozen layer (``image_verifier``).
``host``: the host-filesystem mode (``build``), for a task with no Dockerfile, a ``FROM`` that
envlab cannot build, a host where envlab is not root, or ``images = "off"``; the episode's state
says which mode ran and why.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
from pathlib import Path

from envlab.core.errors import ConfigError, GraderFailed, GraderTainted
from envlab.core.rubric import Reward
from envlab.sandbox import Limits, Mount, SandboxError, verifier_kit
from envlab.sandbox.image import tamper
from envlab.sandbox.image.bases import recipe_for, registered
from envlab.sandbox.image.persistent import SharedImageSandbox
from envlab.sandbox.image.sandbox import ImageSandbox
from envlab.sandbox.image.store import Image, alocked, content_key, images_root
from envlab.sandbox.tasks import offline
from envlab.sandbox.tasks.dockerfile_stages import CopyStep, parse_stages
from envlab.sandbox.tasks.image_build import build_image
from envlab.sandbox.tasks.image_verifier import (
    VerifierPrep,
    prepare_verifier,
    run_image_verifier,
    run_shared_verifier,
)
from envlab.sandbox.tasks.source import TaskSource


def host_mode_reason(folder: TaskSource, setting: str) -> str | None:
    """None when ``folder`` runs in its image; else why it runs on the host's filesystem."""
    if setting == "off":
        if folder.dockerfile is None and folder.config.environment.docker_image:
            raise ConfigError(
                f"task {folder.name}: [environment] docker_image = "
                f"{folder.config.environment.docker_image!r} and no Dockerfile cannot be "
                "honoured with images off: the task would run on the host's system instead. "
                "Turn images on (ENVLAB_IMAGES=auto) or add environment/Dockerfile."
            )
        return "images are off (images = 'off' / ENVLAB_IMAGES=off)"
    image = folder.config.environment.docker_image
    if folder.dockerfile is None and not image:
        return "the task has no environment/Dockerfile"
    if os.geteuid() != 0:
        if folder.dockerfile is None:
            raise ConfigError(f"task {folder.name}: docker_image = {image!r} needs envlab as root")
        return "envlab is not running as root (an image's files and commands are root's)"
    if folder.dockerfile is None:  # a prebuilt image: honoured only if envlab can build it
        try:
            recipe_for(str(image))
        except ConfigError as e:
            if not registered(str(image)):
                raise ConfigError(
                    f"task {folder.name}: [environment] docker_image = {image!r} and no "
                    f"Dockerfile: {e}"
                ) from None
        return None
    stages = parse_stages(folder.dockerfile.read_text(), source=f"{folder.name}/Dockerfile")
    names = {s.name for s in stages if s.name} | {str(s.index) for s in stages}
    refs = [s.base for s in stages if s.base_stage is None]
    refs += [c.from_stage for s in stages for c in s.steps
             if isinstance(c, CopyStep) and c.from_stage and c.from_stage not in names]  # fmt: skip
    for ref in refs:
        try:
            recipe_for(ref)
        except ConfigError as e:
            if not registered(ref):
                return str(e)
    return None


def compose_notes(folder: TaskSource) -> list[str]:
    """What a task's ``environment/docker-compose.yaml`` asks that envlab does not do. Sidecar
    services (more than one) are refused: ``ConfigError`` naming them."""
    path = folder.environment_dir / "docker-compose.yaml"
    if not path.is_file():
        return []
    import yaml

    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    services = data.get("services") or {}
    if len(services) > 1:
        main = "main" if "main" in services else next(iter(services))
        others = ", ".join(s for s in services if s != main)
        raise ConfigError(
            f"task {folder.name}: environment/docker-compose.yaml runs sidecar services ("
            f"{others}) beside {main}: envlab cannot run them without Docker (they would be "
            "sibling sandboxes on a private network, not built yet). Run the task with "
            "Harbor's docker environment, or fold the services into the Dockerfile."
        )
    service = next(iter(services.values()), {}) or {}
    known = {"build", "image", "command", "environment", "deploy", "container_name"}
    ignored = sorted(k for k in service if k not in known)
    if not ignored:
        return []
    return [f"docker-compose.yaml: {', '.join(ignored)} not honoured (one service: its image runs)"]


def shared_verifier(folder: TaskSource, forced: str = "task") -> bool:
    """Whether the task is graded in Harbor's shared verifier mode (the tests in the agent's
    own environment, its processes alive): ``[verifier] environment_mode = "shared"``, unless
    ``forced`` (``separate``/``shared``) says otherwise."""
    if forced != "task":
        return forced == "shared"
    v = folder.config.verifier
    return (getattr(v, "model_extra", None) or {}).get("environment_mode") == "shared"


async def _shared_box(
    folder: TaskSource, image: Image, prep: VerifierPrep, limits: Limits
) -> SharedImageSandbox:
    """A shared sandbox of the task: the verifier's caches and kit are there from the start."""
    kit = await asyncio.to_thread(verifier_kit.image_kit_dir)
    return await SharedImageSandbox.create(
        image=image, limits=limits, network=folder.config.network_for("agent"),
        env=folder.config.environment.env, name=f"agent-{folder.name}",
        extra_lowers=[prep.layer] if prep.layer else [],
        mounts=[Mount(prep.kit, offline.MOUNT), Mount(kit, verifier_kit.IMAGE_KIT)],
    )  # fmt: skip


async def reset_in_image(
    folder: TaskSource, limits: Limits, verifier_mode: str = "task"
) -> tuple[Image, VerifierPrep, ImageSandbox]:
    """Build (or find) the image and the verifier's caches; a fresh sandbox over the image.
    A task graded ``shared`` is calibrated first (what its oracle changes, once per image)."""
    compose_notes(folder)  # refuses sidecars before building anything
    image = await build_image(folder)
    prep = await prepare_verifier(folder, image)
    try:
        if shared_verifier(folder, verifier_mode):
            await calibrate(folder, image, prep, limits)
            box: ImageSandbox = await _shared_box(folder, image, prep, limits)
        else:
            box = await ImageSandbox.create(
                image=image, limits=limits, network=folder.config.network_for("agent"),
                env=folder.config.environment.env, name=f"agent-{folder.name}",
            )  # fmt: skip
    except OSError as e:
        raise SandboxError(f"could not set up the sandbox of task {folder.name!r}: {e}") from e
    return image, prep, box


async def calibrate(
    folder: TaskSource, image: Image, prep: VerifierPrep, limits: Limits
) -> tamper.Expected:
    """What the task expects an agent to change: what its oracle's ``solve.sh`` changed in a
    shared sandbox of the image (run once per image and solution, then cached). No solution:
    nothing is expected, every file of the agent's that the grade uses taints it."""
    if folder.solution is None:
        return tamper.Expected()
    solution = await asyncio.to_thread(_tree_digest, folder.solution_dir)
    key = content_key("calibration-1", image.key, prep.layer is not None, solution)
    path = images_root() / "calibration" / f"{key}.json"
    if path.is_file():
        return tamper.Expected.from_json(json.loads(path.read_text()))
    async with alocked(f"calibration-{key}"):
        if path.is_file():
            return tamper.Expected.from_json(json.loads(path.read_text()))
        box = await _shared_box(folder, image, prep, limits)
        try:
            await asyncio.to_thread(
                shutil.copytree, folder.solution_dir, box.shared("/solution"), dirs_exist_ok=True
            )
            res = await box.exec(
                ["bash", "/solution/solve.sh"], timeout=folder.config.agent.timeout_sec
            )
            lowers = [*image.lowers, *([prep.layer] if prep.layer else [])]
            expected = await asyncio.to_thread(tamper.changed_by, box.upper, lowers)
        finally:
            await box.close()
        if res.timed_out:
            raise ConfigError(f"task {folder.name}: solve.sh timed out while calibrating")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(expected.to_json()))
        return expected


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        h.update(str(p.relative_to(root)).encode() + b"\0")
        if p.is_file() and not p.is_symlink():
            h.update(p.read_bytes())
    return h.hexdigest()


async def grade_in_image(
    folder: TaskSource, image: Image, box: ImageSandbox, prep: VerifierPrep
) -> Reward:
    """``separate``: the tests in a fresh sandbox of the pristine image with the agent's
    workspace carried (its processes killed first). ``shared``: in the agent's own sandbox,
    its processes alive, with tamper evidence."""
    cfg = folder.config.environment
    try:
        if isinstance(box, SharedImageSandbox):
            return await _grade_shared(folder, image, box, prep)
        await box.kill_all()
        return await run_image_verifier(
            folder,
            image,
            box.upper,
            prep,
            memory_mb=cfg.memory_mb or 4096,
            network=folder.config.network_for("verifier"),
        )
    except GraderFailed as e:
        e.details.setdefault("sandbox_mode", "image")
        raise


async def _grade_shared(
    folder: TaskSource, image: Image, box: SharedImageSandbox, prep: VerifierPrep
) -> Reward:
    """The shared grade, tainted (``GraderTainted``) when the tests read or ran a file of the
    agent's layer that the task does not expect it to change."""
    expected = await calibrate(folder, image, prep, box.limits)
    assert box.storage is not None
    await asyncio.to_thread(tamper.check_records_reads, box.storage.fs)
    armed = await asyncio.to_thread(tamper.arm, box.upper)
    failure: GraderFailed | None = None
    try:
        reward = await run_shared_verifier(folder, image, box)
    except GraderFailed as e:
        failure = e
    bad = await asyncio.to_thread(tamper.tainted, armed, expected)
    if bad:
        details = {**(failure.details if failure else reward.details)}
        details |= {"grader_tainted": bad[:200], "verifier_mode": "shared"}
        raise GraderTainted(
            f"grader_tainted: the tests used {len(bad)} file(s) the agent changed outside what "
            f"the task expects ({', '.join(bad[:5])}); the grade is not the tests' alone",
            details=details,
        )
    if failure is not None:
        raise failure
    return reward
