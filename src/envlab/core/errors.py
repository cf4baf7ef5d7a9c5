"""One hierarchy of errors. Every message says what was wrong and how to fix it."""

from __future__ import annotations


class EnvlabError(Exception):
    """Base class of every error envlab raises on purpose."""


class ConfigError(EnvlabError):
    """Bad input from the user: a name, a path, an option."""


class NotFoundError(ConfigError):
    """A named thing (environment, agent, run) does not exist."""


class StoreError(EnvlabError):
    """A run directory or trajectory file is unusable."""


class InfraError(EnvlabError):
    """The infrastructure failed (transport, sandbox, engine): never the agent's fault.

    Episodes that end in an ``InfraError`` are retried and excluded from scores.
    """


class ModelUnavailable(InfraError):
    """envlab's own model transport could not get an answer from the model server (refused,
    dropped, timed out, overloaded or answering what is not a chat completion, past its
    retries; a wrong key, model name or URL). Raised by ``envlab.models``, never by agents.

    Whose failure it is depends on whose model it is, decided once, by the engine
    (``rollout.episode``): while the agent starts or acts it is the agent's model (the agent is
    model + harness + operations), so the episode is the agent's failure (``agent_error``, error
    kind ``model``, scored 0) unless the run excludes model failures
    (``EpisodeConfig.model_failures="exclude"``: ``infra_error``, kind ``model``). Raised by an
    environment or a grader (a simulated user's model, a judge) it is the machinery's, like any
    ``InfraError``. Any other ``InfraError`` raised by an agent is the agent's failure.
    """


class ToolCallError(EnvlabError):
    """A tool call the environment could not execute; its message is shown to the agent."""


class GraderFailed(EnvlabError):
    """The grade of the agent's final state is not valid: the reward file is missing, malformed
    or out of range, the verifier was killed, hung or its test runner never finished its session.

    The agent may have caused it, so it is never excluded like an ``InfraError``: the grader is
    run once more, fresh, on the same frozen state, and if that fails too the episode scores 0
    and records ``grader_failed`` with this message. ``details`` (e.g. the verifier's exit code
    and output tail) are kept in the trajectory's ``info["grade"]``.
    """

    def __init__(self, message: str, *, details: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.details = details or {}


class GraderTainted(GraderFailed):
    """The grade ran something the agent changed outside what the task expects it to change
    (Harbor's ``shared`` verifier mode: the tests run in the agent's own filesystem). Scored 0
    like any invalid grade, never excluded; ``details["grader_tainted"]`` names the files."""


class EpisodeOrderError(EnvlabError):
    """An environment was driven out of order: ``step`` before ``reset``, ``step`` after the
    episode ended, a second ``reset`` (an environment serves one episode)."""


class EpisodeTimeExceeded(EnvlabError):
    """The agent's time for the episode ran out: the agent's failure (status ``timeout``)."""
