"""Which mode a task folder runs in, and an episode's reset and grade in its image.

``image``: the task's Dockerfile is built into an image (``image_build``), the agent's commands
run over a fresh overlay of it, the tests over the agent's frozen layer (``image_verifier``).
``host``: the host-filesystem mode (``build``), for a task with no Dockerfile, a ``FROM`` that
envlab cannot build, a host where envlab is not root, or ``images = "off"``; the episode's state
says which mode ran and why.
"""

from __future__ import annotations

import asyncio
import os

from envlab.core.errors import ConfigError, GraderFailed
from envlab.core.rubric import Reward
from envlab.envs.taskfolder import offline
from envlab.envs.taskfolder.dockerfile_stages import CopyStep, parse_stages
from envlab.envs.taskfolder.image_build import build_image
from envlab.envs.taskfolder.image_verifier import (
    VerifierPrep,
    prepare_verifier,
    run_image_verifier,
    run_shared_verifier,
)
from envlab.envs.taskfolder.model import TaskFolder
from envlab.sandbox import Limits, Mount, SandboxError, verifier_kit
from envlab.sandbox.image.bases import recipe_for, registered
from envlab.sandbox.image.persistent import SharedImageSandbox
from envlab.sandbox.image.sandbox import ImageSandbox
from envlab.sandbox.image.store import Image


def host_mode_reason(folder: TaskFolder, setting: str) -> str | None:
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


def compose_notes(folder: TaskFolder) -> list[str]:
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


def shared_verifier(folder: TaskFolder) -> bool:
    """Whether the task asks for Harbor's shared verifier mode (the tests in the agent's own
    environment, its processes alive): ``[verifier] environment_mode = "shared"``."""
    v = folder.config.verifier
    return (getattr(v, "model_extra", None) or {}).get("environment_mode") == "shared"


async def reset_in_image(
    folder: TaskFolder, limits: Limits
) -> tuple[Image, VerifierPrep, ImageSandbox]:
    """Build (or find) the image and the verifier's caches; a fresh sandbox over the image."""
    compose_notes(folder)  # refuses sidecars before building anything
    image = await build_image(folder)
    prep = await prepare_verifier(folder, image)
    options: dict[str, object] = dict(
        image=image, limits=limits, network=folder.config.network_for("agent"),
        env=folder.config.environment.env, name=f"agent-{folder.name}",
    )  # fmt: skip
    try:
        if shared_verifier(folder):  # the verifier's caches and kit are there from the start
            options["extra_lowers"] = [prep.layer] if prep.layer else []
            kit = await asyncio.to_thread(verifier_kit.image_kit_dir)
            options["mounts"] = [Mount(prep.kit, offline.MOUNT), Mount(kit, verifier_kit.IMAGE_KIT)]
            box: ImageSandbox = await SharedImageSandbox.create(**options)  # type: ignore[arg-type]
        else:
            box = await ImageSandbox.create(**options)  # type: ignore[arg-type]
    except OSError as e:
        raise SandboxError(f"could not set up the sandbox of task {folder.name!r}: {e}") from e
    return image, prep, box


async def grade_in_image(
    folder: TaskFolder, image: Image, box: ImageSandbox, prep: VerifierPrep
) -> Reward:
    """The tests over the agent's frozen layer (its processes killed first); in the shared
    mode, in the agent's own sandbox with its processes alive."""
    cfg = folder.config.environment
    try:
        if isinstance(box, SharedImageSandbox):
            return await run_shared_verifier(folder, image, box)
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
