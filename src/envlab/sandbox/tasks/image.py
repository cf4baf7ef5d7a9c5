"""``ImageRuntime``: a task in an image built from its Dockerfile (no Docker engine).

The image (``image_build``: layers cached by content) and the verifier's offline caches
(``image_verifier.prepare_verifier``) are prepared once; every episode's sandbox is a fresh
overlay of the image, the agent root in it. Grading follows Harbor's verifier modes:
``separate`` (the default): the agent's processes are killed and the tests run in a fresh
sandbox of the pristine image into which only its workspace is carried
(``image_verifier.run_image_verifier``); ``shared`` (``[verifier] environment_mode =
"shared"``): the tests run in the agent's own sandbox, its processes alive, with tamper evidence
calibrated on the oracle's run (``envlab.sandbox.image.tamper``): a grade that read or ran a
file the agent changed outside what the task expects is ``grader_tainted``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from envlab.core.errors import ConfigError, GraderFailed, GraderTainted
from envlab.core.rubric import Reward
from envlab.sandbox import Limits, Mount, Sandbox, SandboxError, verifier_kit
from envlab.sandbox.image import tamper
from envlab.sandbox.image.persistent import SharedImageSandbox
from envlab.sandbox.image.sandbox import ImageSandbox
from envlab.sandbox.image.store import Image, alocked, content_key, images_root
from envlab.sandbox.tasks import offline
from envlab.sandbox.tasks.carry import materialize
from envlab.sandbox.tasks.image_build import build_image
from envlab.sandbox.tasks.image_verifier import (
    VerifierPrep,
    prepare_verifier,
    run_image_verifier,
    run_shared_verifier,
    workspace_of,
)
from envlab.sandbox.tasks.runtime import BuildProgress, compose_notes
from envlab.sandbox.tasks.source import TaskSource
from envlab.sandbox.tasks.verifier import GradeDetails

SETTLE_S = 2.0
"""How long the oracle's live processes (a server it started) get to write their first files
before its changes are recorded for the shared mode's expectations."""


class ImageRuntime:
    """Build one with ``await ImageRuntime.prepare(task, shared)``."""

    mode = "image"

    def __init__(
        self,
        task: TaskSource,
        image: Image,
        prep: VerifierPrep,
        shared: bool,
        compose: list[str] | None = None,
    ) -> None:
        """``compose``: what the task's compose file asks that is not honoured (noted)."""
        self.task, self.image, self.prep = task, image, prep
        self.verifier_mode = "shared" if shared else "separate"
        self.notes = ["mode: image", *(compose or []), *image.notes]
        self.env = dict(image.config.env)

    @classmethod
    async def prepare(
        cls, task: TaskSource, shared: bool, progress: BuildProgress | None = None
    ) -> ImageRuntime:
        """Build (or find) the image and the verifier's caches; a task graded ``shared`` is
        calibrated too (what its oracle changes, once per image)."""
        compose = compose_notes(task)  # refuses sidecars before building anything
        image = await build_image(task, **({"progress": progress} if progress else {}))
        prep = await prepare_verifier(task, image)
        runtime = cls(task, image, prep, shared, compose)
        if shared:
            memory = (task.config.environment.memory_mb or 4096) << 20
            await runtime.calibrate(Limits(memory_bytes=memory))
        return runtime

    async def open(self, limits: Limits, name: str) -> Sandbox:
        task = self.task
        try:
            if self.verifier_mode == "shared":
                return await self._shared_box(limits, name)
            return await ImageSandbox.create(
                image=self.image, limits=limits, network=task.config.network_for("agent"),
                env=task.config.environment.env, name=name,
            )  # fmt: skip
        except OSError as e:
            raise SandboxError(f"could not set up the sandbox of task {task.name!r}: {e}") from e

    async def _shared_box(self, limits: Limits, name: str) -> SharedImageSandbox:
        """A shared sandbox: the verifier's caches and kit are there from the start."""
        kit = await asyncio.to_thread(verifier_kit.image_kit_dir)
        prep = self.prep
        return await SharedImageSandbox.create(
            image=self.image, limits=limits, network=self.task.config.network_for("agent"),
            env=self.task.config.environment.env, name=name,
            extra_lowers=[prep.layer] if prep.layer else [],
            mounts=[Mount(prep.kit, offline.MOUNT), Mount(kit, verifier_kit.IMAGE_KIT)],
        )  # fmt: skip

    async def calibrate(self, limits: Limits) -> tamper.Expected:
        """What the task expects an agent to change: what its oracle's ``solve.sh`` changed in
        a shared sandbox of the image, over two runs (names that differ between them mark a
        volatile directory), each measured once its live processes had ``SETTLE_S`` to write;
        once per image and solution, then cached. No solution: nothing is expected; every file
        of the agent's the grade uses taints it."""
        task = self.task
        if task.solution is None:
            return tamper.Expected()
        solution = await asyncio.to_thread(_tree_digest, task.solution_dir)
        key = content_key("calibration-2", self.image.key, self.prep.layer is not None, solution)
        path = images_root() / "calibration" / f"{key}.json"
        async with alocked(f"calibration-{key}"):
            if not path.is_file():
                first = await self._oracle_changes(limits)
                expected = first.merged(await self._oracle_changes(limits))
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(expected.to_json()))
        return tamper.Expected.from_json(json.loads(path.read_text()))

    async def _oracle_changes(self, limits: Limits) -> tamper.Expected:
        task = self.task
        box = await self._shared_box(limits, f"calibrate-{task.name}")
        try:
            await asyncio.to_thread(
                shutil.copytree, task.solution_dir, box.shared("/solution"), dirs_exist_ok=True
            )
            timeout = task.config.agent.timeout_sec
            res = await box.exec(["bash", "/solution/solve.sh"], timeout=timeout)
            await asyncio.sleep(SETTLE_S)  # what it left running writes its first files
            expected = await asyncio.to_thread(tamper.changed_by, box.upper)
        finally:
            await box.close()
        if res.timed_out:
            raise ConfigError(f"task {task.name}: solve.sh timed out while calibrating")
        return expected

    async def grade(self, box: Sandbox) -> Reward:
        try:
            if isinstance(box, SharedImageSandbox):
                return await self._grade_shared(box)
            assert isinstance(box, ImageSandbox)
            await box.kill_all()
            cfg = self.task.config.environment
            return await run_image_verifier(
                self.task, self.image, box.upper, self.prep,
                memory_mb=cfg.memory_mb or 4096,
                network=self.task.config.network_for("verifier"),
            )  # fmt: skip
        except GraderFailed as e:
            e.details.setdefault("sandbox_mode", "image")
            raise

    async def _grade_shared(self, box: SharedImageSandbox) -> Reward:
        """The shared grade, tainted (``GraderTainted``) when the tests read or ran a file of
        the agent's layer that the task does not expect it to change."""
        expected = await self.calibrate(box.limits)
        assert box.storage is not None
        await asyncio.to_thread(tamper.check_records_reads, box.storage.fs)
        armed = await asyncio.to_thread(tamper.arm, box.upper)
        failure: GraderFailed | None = None
        try:
            reward = await run_shared_verifier(self.task, self.image, box)
        except GraderFailed as e:
            failure = e
        bad = await asyncio.to_thread(tamper.tainted, armed, expected)
        if bad:
            known = GradeDetails.model_fields
            said = failure.details if failure else reward.details
            grade = GradeDetails(**{k: v for k, v in said.items() if k in known})
            grade.grader_tainted, grade.verifier_mode = bad[:200], "shared"
            details = grade.record()
            raise GraderTainted(
                f"grader_tainted: the tests used {len(bad)} file(s) the agent changed outside "
                f"what the task expects ({', '.join(bad[:5])}); the grade is not the tests' alone",
                details=details,
            )
        if failure is not None:
            raise failure
        return reward

    def state(self) -> dict[str, Any]:
        return {
            "workspace_at_reset": self.image.key,
            "sandbox_mode": "image",
            "verifier_mode": self.verifier_mode,
        }

    async def workspace_view(self) -> Path:
        return await asyncio.to_thread(materialize, self.image, workspace_of(self.image))


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        h.update(str(p.relative_to(root)).encode() + b"\0")
        if p.is_file() and not p.is_symlink():
            h.update(p.read_bytes())
    return h.hexdigest()
