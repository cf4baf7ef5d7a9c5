"""What the task runtime needs to know of a task: ``TaskSource``.

The runtime (this package: building a task's workspace, on the host's filesystem or as an image,
and running its verifier) sits below the environments. It reads a task through this protocol,
which ``envlab.envs.taskfolder.TaskFolder`` (the Harbor folder format) satisfies; another format
would satisfy it too, without the runtime importing it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol


class TaskSource(Protocol):
    """A task as the runtime reads it: its folders and its settings (``task.toml``'s)."""

    @property
    def name(self) -> str: ...

    @property
    def path(self) -> Path: ...

    @property
    def environment_dir(self) -> Path: ...

    @property
    def tests_dir(self) -> Path: ...

    @property
    def solution_dir(self) -> Path: ...

    @property
    def solution(self) -> Path | None: ...

    @property
    def dockerfile(self) -> Path | None: ...

    @property
    def config(self) -> Any:
        """The task's settings: ``environment`` (``env``, ``memory_mb``, ``storage_mb``,
        ``docker_image``, ``build_timeout_sec``), ``verifier`` (``timeout_sec``, ``env``,
        ``environment_mode``), ``agent`` (``timeout_sec``) and ``network_for(phase)``."""
        ...

    def content_hash(self) -> str: ...
