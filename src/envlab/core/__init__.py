"""The contract every other layer builds on. Imports nothing else from envlab."""

from envlab.core.agent import Agent, AgentClass, AgentFactory, EpisodeContext
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
    EpisodeOrderError,
    EpisodeTimeExceeded,
    GraderFailed,
    GraderTainted,
    InfraError,
    ModelUnavailable,
    NotFoundError,
    StoreError,
    ToolCallError,
)
from envlab.core.limits import Limits
from envlab.core.rubric import Component, Reward, Rubric, validate_reward
from envlab.core.spec import EnvSpec, NoConfig
from envlab.core.toolenv import GradingContext, ToolEnv
from envlab.core.tools import ToolSpec, tool, tool_spec
from envlab.core.trajectory import (
    AgentSpec,
    EpisodeError,
    EpisodeRecord,
    Status,
    StepRecord,
    Timings,
    TokenView,
    Trajectory,
)
from envlab.core.types import Action, Observation, StepResult, Task, TaskSet, ToolCall, ToolResult
from envlab.core.wrappers import (
    EpisodeTimeLimit,
    OrderEnforcing,
    StepLimit,
    WrappedSpec,
    Wrapper,
)

__all__ = [
    "Action",
    "Agent",
    "AgentClass",
    "AgentClock",
    "AgentFactory",
    "AgentSpec",
    "Component",
    "ConfigError",
    "EnvSpec",
    "Environment",
    "EnvlabError",
    "EpisodeContext",
    "EpisodeError",
    "EpisodeOrderError",
    "EpisodeRecord",
    "EpisodeTimeExceeded",
    "EpisodeTimeLimit",
    "GraderFailed",
    "GraderTainted",
    "GradingContext",
    "InfraError",
    "Limits",
    "ModelUnavailable",
    "NoConfig",
    "NotFoundError",
    "Observation",
    "OrderEnforcing",
    "Reward",
    "Rubric",
    "Status",
    "StepLimit",
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
    "WrappedSpec",
    "Wrapper",
    "credit_not_agent_time",
    "install_agent_clock",
    "not_agent_seconds",
    "not_agent_time",
    "reset_agent_clock",
    "tool",
    "tool_spec",
    "validate_reward",
]
