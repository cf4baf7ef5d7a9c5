"""Small environments for the serve tests (importable by path: ``tests.serve.specs:...``)."""

from __future__ import annotations

from typing import ClassVar

from envlab.core import Component, GraderFailed, GradingContext, Limits, Rubric
from tests.support.envs import EchoConfig, EchoEnv, EchoEpisode

CLOSED: list[str] = []
"""Task ids of the ``Recorded`` episodes closed so far (the server runs in this process)."""


class RecordedEpisode(EchoEpisode):
    async def close(self) -> None:
        CLOSED.append(self.task.id if self.task is not None else "?")
        await super().close()


class Recorded(EchoEnv):
    """``echo`` whose episodes note their close in ``CLOSED``."""

    environment = RecordedEpisode
    default_limits = Limits(max_steps=3)


def _broken_grader(ctx: GradingContext) -> float:
    raise GraderFailed("the reward file is missing")


class BrokenGraderEpisode(EchoEpisode):
    rubric: ClassVar[Rubric] = Rubric([Component("answered_ok", _broken_grader)])


class BrokenGrader(EchoEnv):
    """``echo`` whose grader always fails (an agent can cause that: scored 0, never excluded)."""

    environment = BrokenGraderEpisode


class CrashingStepEpisode(EchoEpisode):
    async def step(self, action):  # type: ignore[no-untyped-def]
        if action.text == "crash":
            raise RuntimeError("the environment broke")
        return await super().step(action)


class CrashingStep(EchoEnv):
    environment = CrashingStepEpisode


class LoggedConfig(EchoConfig):
    close_log: str
    """A file each closed episode appends its task id to (for servers in another process)."""


class LoggedEpisode(EchoEpisode):
    async def close(self) -> None:
        assert isinstance(self.spec, Logged)
        with open(self.spec.config.close_log, "a") as f:
            f.write(f"{self.task.id if self.task is not None else '?'}\n")
        await super().close()


class Logged(EchoEnv):
    """``echo`` whose episodes append their task id to ``close_log`` when closed."""

    Config = LoggedConfig
    environment = LoggedEpisode
    config: LoggedConfig
