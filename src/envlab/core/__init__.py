"""The contract every other layer builds on. Imports nothing else from envlab."""

from envlab.core.agent import Agent, EpisodeContext
from envlab.core.clock import (
    AgentClock,
    credit_not_agent_time,
    install_agent_clock,
    not_agent_seconds,
    not_agent_time,
    reset_agent_clock,
)
from envlab.core.environment import Environment
from envlab.core.errors import (
    ConfigError,
    EnvlabError,
    GraderFailed,
    InfraError,
    NotFoundError,
    StoreError,
    ToolCallError,
)
from envlab.core.rubric import Component, Reward, Rubric, validate_reward
from envlab.core.toolenv import ToolEnv
from envlab.core.tools import ToolSpec, tool, tool_spec
from envlab.core.trajectory import (
    AgentSpec,
    EpisodeRecord,
    Status,
    StepRecord,
    Timings,
    TokenView,
    Trajectory,
)
from envlab.core.types import Action, Observation, StepResult, Task, TaskSet, ToolCall, ToolResult

__all__ = [
    "Action",
    "Agent",
    "AgentClock",
    "AgentSpec",
    "Component",
    "ConfigError",
    "Environment",
    "EnvlabError",
    "EpisodeContext",
    "EpisodeRecord",
    "GraderFailed",
    "InfraError",
    "NotFoundError",
    "Observation",
    "Reward",
    "Rubric",
    "Status",
    "StepRecord",
    "StepResult",
    "StoreError",
    "Task",
    "TaskSet",
    "Timings",
    "TokenView",
    "ToolCall",
    "ToolCallError",
    "ToolEnv",
    "ToolResult",
    "ToolSpec",
    "Trajectory",
    "credit_not_agent_time",
    "install_agent_clock",
    "not_agent_seconds",
    "not_agent_time",
    "reset_agent_clock",
    "tool",
    "tool_spec",
    "validate_reward",
]
