"""Which mode a task folder runs in, and an episode's reset and grade in its image.

``image``: the task's Dockerfile is built into an image (``image_build``), the agent's commands
run over a fresh overlay of it, the tests over the agent's frozen layer (``image_verifier``).
``host``: the host-filesystem mode (``build``), for a task with no Dockerfile, a ``FROM`` that
envlab cannot build, a host where envlab is not root, or ``images = "off"``; the episode's state
says which mode ran and why.
"""

from __future__ import annotations

import os

from envlab.core.errors import ConfigError, GraderFailed
from envlab.core.rubric import Reward
from envlab.envs.taskfolder.dockerfile_stages import parse_stages
from envlab.envs.taskfolder.image_build import build_image
from envlab.envs.taskfolder.image_verifier import VerifierPrep, prepare_verifier, run_image_verifier
from envlab.envs.taskfolder.model import TaskFolder
from envlab.sandbox import Limits, SandboxError
from envlab.sandbox.image.bases import normalise, recipe_for
from envlab.sandbox.image.sandbox import ImageSandbox
from envlab.sandbox.image.store import Image, images_root


def host_mode_reason(folder: TaskFolder, setting: str) -> str | None:
    """None when ``folder`` runs in its image; else why it runs on the host's filesystem."""
    if setting == "off":
        return "images are off (images = 'off' / ENVLAB_IMAGES=off)"
    if folder.dockerfile is None:
        return "the task has no environment/Dockerfile"
    if os.geteuid() != 0:
        return "envlab is not running as root (an image's files and commands are root's)"
    stages = parse_stages(folder.dockerfile.read_text(), source=f"{folder.name}/Dockerfile")
    for stage in stages:
        if stage.base_stage is not None:
            continue
        try:
            recipe_for(stage.base)
        except ConfigError as e:
            if not _registered(stage.base):
                return str(e)
    return None


def _registered(ref: str) -> bool:
    from envlab.sandbox.image.store import content_key

    return (images_root() / "bases" / f"local-{content_key(normalise(ref))}").is_dir()


async def reset_in_image(
    folder: TaskFolder, limits: Limits
) -> tuple[Image, VerifierPrep, ImageSandbox]:
    """Build (or find) the image and the verifier's caches; a fresh sandbox over the image."""
    image = await build_image(folder)
    prep = await prepare_verifier(folder, image)
    try:
        box = await ImageSandbox.create(
            image=image,
            limits=limits,
            network=folder.config.network_for("agent"),
            env=folder.config.environment.env,
            name=f"agent-{folder.name}",
        )
    except OSError as e:
        raise SandboxError(f"could not set up the sandbox of task {folder.name!r}: {e}") from e
    return image, prep, box


async def grade_in_image(
    folder: TaskFolder, image: Image, box: ImageSandbox, prep: VerifierPrep
) -> Reward:
    """The tests over the agent's frozen layer (its processes are already dead)."""
    cfg = folder.config.environment
    try:
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
