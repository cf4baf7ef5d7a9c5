"""The task runtime: a task's workspace built once (on the host's filesystem, or as an image
from its Dockerfile), a fresh sandbox per episode, and its verifier, run after the agent.

One protocol, ``TaskRuntime`` (``runtime.py``), two implementations: ``HostRuntime``
(``host.py``) and ``ImageRuntime`` (``image.py``). The runtime reads a task through
``TaskSource`` (``source.py``), never through the folder format itself.
"""

from envlab.sandbox.tasks.dockerfile import DockerfileError
from envlab.sandbox.tasks.host_build import (
    BuildPlan,
    PreparedWorkspace,
    parse_dockerfile,
    prepare_workspace,
)
from envlab.sandbox.tasks.host_verifier import run_verifier
from envlab.sandbox.tasks.reward_file import read_reward_files
from envlab.sandbox.tasks.source import TaskSource
from envlab.sandbox.tasks.verifier import GradeDetails, judge, run_tests

__all__ = [
    "BuildPlan",
    "DockerfileError",
    "GradeDetails",
    "PreparedWorkspace",
    "TaskSource",
    "judge",
    "parse_dockerfile",
    "prepare_workspace",
    "read_reward_files",
    "run_tests",
    "run_verifier",
]
