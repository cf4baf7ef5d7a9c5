"""``TaskRuntime``: the one protocol of a task's runtime, and which implementation runs a task.

A task is *prepared* once (its workspace built, cached by content), then every episode *opens*
a fresh sandbox from it and, when the agent is done, has it *graded*. Two implementations:

- ``ImageRuntime`` (``image.py``): the task's Dockerfile built into an image (layers, no Docker
  engine); the agent is root in a fresh overlay of it; graded as Harbor's verifier modes say
  (``separate``: a fresh sandbox of the pristine image with the workspace carried; ``shared``:
  the agent's own sandbox, with tamper evidence).
- ``HostRuntime`` (``host.py``): the host-filesystem mode, for a task with no Dockerfile, a
  ``FROM`` that envlab cannot build, a host where envlab is not root, or images off; the
  workspace ``/app`` is the only thing a task shapes, graded in a separate sandbox.

A new backend is a third implementation of ``TaskRuntime``, not a branch in its callers: the
episode, ``envlab task`` and ``envlab vet`` only call ``prepare_runtime`` and the protocol.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from envlab.core.errors import ConfigError
from envlab.sandbox.image.bases import buildable_here, recipe_for, registered
from envlab.sandbox.tasks.dockerfile import Copy, parse_stages
from envlab.sandbox.tasks.source import TaskSource

if TYPE_CHECKING:
    from envlab.core.rubric import Reward
    from envlab.sandbox.base import Limits, Sandbox

log = logging.getLogger(__name__)
VerifierMode = Literal["task", "separate", "shared"]
BuildProgress = Callable[[str, bool, float], None]


class TaskRuntime(Protocol):
    """A prepared task: open a fresh sandbox per episode, grade it after the agent."""

    mode: str
    """``image`` or ``host``."""
    verifier_mode: str
    """Harbor's verifier mode that grades it: ``separate`` or ``shared``."""
    env: dict[str, str]
    """What the agent's commands start with from the build (the Dockerfile's ``ENV``)."""
    notes: list[str]
    """How it was prepared: the mode (and why the host's), where the build differs from
    Docker's, what a compose file asks that is not honoured."""

    async def open(self, limits: Limits, name: str) -> Sandbox:
        """A fresh sandbox of the task's workspace for one episode."""
        ...

    async def grade(self, box: Sandbox) -> Reward:
        """Run the task's tests on what the agent left in ``box`` (the agent is done); the
        valid reward, ``GraderFailed`` (scored 0) or ``InfraError`` (the machinery's)."""
        ...

    def state(self) -> dict[str, Any]:
        """What an episode's state says of its workspace: mode, digest at reset, reasons."""
        ...

    async def workspace_view(self) -> Path:
        """A host directory holding the workspace as an episode starts it (read it only)."""
        ...


async def prepare_runtime(
    task: TaskSource,
    *,
    images: str = "auto",
    verifier_mode: VerifierMode = "task",
    backend: str = "bwrap",
    progress: BuildProgress | None = None,
) -> TaskRuntime:
    """The runtime of ``task``: its image where it builds (``images="auto"``), else the host's
    filesystem; built now or found in the cache. ``progress(what, cached, seconds)`` hears of
    each layer of an image as it is built or found."""
    reason = host_mode_reason(task, images)
    if reason is None:
        from envlab.sandbox.tasks.image import ImageRuntime

        shared = shared_verifier(task, verifier_mode)
        return await ImageRuntime.prepare(task, shared, progress)
    from envlab.sandbox.tasks.host import HostRuntime

    return await HostRuntime.prepare(task, reason, backend)


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
             if isinstance(c, Copy) and c.from_stage and c.from_stage not in names]  # fmt: skip
    for ref in refs:
        try:
            recipe_for(ref)
        except ConfigError as e:
            if not registered(ref):
                return str(e)
        why = buildable_here(ref)
        if why is not None:
            _say_once(why)
            return why
    return None


_said: set[str] = set()


def _say_once(message: str) -> None:
    """Warn once per process (every task of a run would say the same)."""
    if message not in _said:
        _said.add(message)
        log.warning("%s; those tasks run in the host-filesystem mode instead", message)


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
    return getattr(v, "environment_mode", "separate") == "shared"
