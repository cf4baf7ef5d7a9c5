"""The fixture's taskset: sums, answered as ``\\boxed{N}``."""

from __future__ import annotations

from collections.abc import Iterable

import verifiers.v1 as vf

PROBLEMS = [(2, 3), (7, 5), (12, 30), (9, 9), (41, 1), (100, 23)]
SYSTEM_PROMPT = "Solve the problem. Put the final answer in \\boxed{}."


class ArithData(vf.TaskData):
    answer: str = ""


class ArithTask(vf.Task[ArithData, vf.State, vf.TaskConfig]):
    @vf.reward
    async def correct(self, task: ArithData, trace: vf.Trace) -> float:
        """1 when the last reply's boxed answer equals the reference."""
        return 1.0 if vf.extract_boxed_answer(trace.last_reply, strict=True) == task.answer else 0.0

    @vf.reward(weight=0.5)
    async def boxed_format(self, trace: vf.Trace) -> float:
        """1 when the last reply has a ``\\boxed{}`` answer at all."""
        return 1.0 if vf.extract_boxed_answer(trace.last_reply, strict=True) else 0.0

    @vf.metric
    async def reply_chars(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply))


class ArithTaskset(vf.Taskset[ArithTask, vf.TasksetConfig]):
    def load(self) -> Iterable[ArithTask]:
        for a, b in PROBLEMS:
            data = ArithData(
                id=f"sum-{a}-{b}",
                prompt=f"What is {a} + {b}?",
                system_prompt=SYSTEM_PROMPT,
                answer=str(a + b),
            )
            yield ArithTask(data, self.config.task)
