"""Task folders (the Harbor format) as environments: ``TerminalEnv`` (the spec) makes a
``TerminalEpisode`` per episode. The folder format (``task.toml``, reading a folder) is here;
how a task's workspace is built and graded is the sandbox layer's (``envlab.sandbox.tasks``)."""

from envlab.envs.taskfolder.episode import TerminalEpisode
from envlab.envs.taskfolder.model import (
    TaskConfig,
    TaskFolder,
    find_task_folders,
    is_task_folder,
    load_task_folder,
)
from envlab.envs.taskfolder.spec import TerminalConfig, TerminalEnv, load_task_env

__all__ = [
    "TaskConfig",
    "TaskFolder",
    "TerminalConfig",
    "TerminalEnv",
    "TerminalEpisode",
    "find_task_folders",
    "is_task_folder",
    "load_task_env",
    "load_task_folder",
]
