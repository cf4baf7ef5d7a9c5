"""Task folders (the Harbor format) as environments: ``TerminalEnv`` (the spec) makes a
``TerminalEpisode`` per episode; build, sandbox, tools, verifier."""

from envlab.envs.taskfolder.build import PreparedWorkspace, prepare_workspace
from envlab.envs.taskfolder.dockerfile import BuildPlan, DockerfileError, parse_dockerfile
from envlab.envs.taskfolder.episode import TerminalEpisode
from envlab.envs.taskfolder.model import (
    TaskConfig,
    TaskFolder,
    find_task_folders,
    is_task_folder,
    load_task_folder,
)
from envlab.envs.taskfolder.reward_file import read_reward_files
from envlab.envs.taskfolder.spec import TerminalConfig, TerminalEnv, load_task_env
from envlab.envs.taskfolder.verifier import judge, run_verifier

__all__ = [
    "BuildPlan",
    "DockerfileError",
    "PreparedWorkspace",
    "TaskConfig",
    "TaskFolder",
    "TerminalConfig",
    "TerminalEnv",
    "TerminalEpisode",
    "find_task_folders",
    "is_task_folder",
    "judge",
    "load_task_env",
    "load_task_folder",
    "parse_dockerfile",
    "prepare_workspace",
    "read_reward_files",
    "run_verifier",
]
