"""Token-exactness: does an episode's token view match what its recorded messages re-render to?

For every model turn ``k`` the messages before the reply (``steps[i].message_index``) are
rendered with the model's chat template and tokenizer, and compared with
``tokens.turn_prompt(k)``, the prompt ids the model actually got. A trainer that re-tokenizes the
chat sees exactly those ids only when they match; a mismatch is a *drift*, named by episode,
turn and the first position that differs.

Renderers (``renderer_for``):

- ``embedded``: envlab's own engine (SmolLM2 GGUF, llama.cpp or torch: the file's tokenizer
  either way): its chat template plus the Hermes tool rewriting and the ``tool_choice``
  prefill, as ``envlab serve-model`` renders a request;
- a tokenizer directory (transformers, ``local_files_only``): ``apply_chat_template(messages,
  tools=..., add_generation_prompt=True)`` then ``encode(add_special_tokens=False)``, as vLLM and
  SGLang render a chat request.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from envlab.core import ConfigError, Trajectory
from envlab.runs import RunDir

_REQUIRED = re.compile(r"required for the first (\d+) turn")


class Renderer(Protocol):
    name: str

    def prompt_ids(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        tool_choice: str | None,
    ) -> list[int]: ...


class EmbeddedRenderer:
    """The embedded SmolLM2 engine's own rendering and tokenizer."""

    name = "embedded"

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def prompt_ids(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        tool_choice: str | None,
    ) -> list[int]:
        from envlab.models.wire import ChatMessage

        wire = [ChatMessage.model_validate(m) for m in messages]
        return self.engine.tokenize(self.engine.template.render(wire, tools, tool_choice).text)


class TokenizerRenderer:
    """A Hugging Face tokenizer with a chat template (a local directory)."""

    def __init__(self, tokenizer: Any, name: str) -> None:
        self.tokenizer, self.name = tokenizer, name

    @classmethod
    def load(cls, path: str | Path) -> TokenizerRenderer:
        from transformers import AutoTokenizer

        try:
            tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        except (OSError, ValueError) as e:
            raise ConfigError(
                f"--tokenizer {path}: cannot load a tokenizer from it ({e}); give a directory "
                "written by tokenizer.save_pretrained() with a chat template"
            ) from e
        if not getattr(tok, "chat_template", None):
            raise ConfigError(f"--tokenizer {path}: the tokenizer has no chat template to render")
        return cls(tok, str(path))

    def prompt_ids(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        tool_choice: str | None,
    ) -> list[int]:
        text = self.tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=True, tokenize=False
        )
        return list(self.tokenizer.encode(text, add_special_tokens=False))


def renderer_for(run: RunDir, tokenizer: str | None) -> Renderer:
    """``tokenizer``: ``embedded``, a tokenizer directory, or ``None`` (the embedded engine when
    the run's agent is the embedded SmolLM2, else a ``ConfigError`` asking for one)."""
    from envlab.models.weights import SMOLLM2_MODEL_ID

    agent = run.info.agent
    if tokenizer is None and agent.model_id != SMOLLM2_MODEL_ID:
        raise ConfigError(
            f"{run.path}: the run's model is {agent.model_id!r}, not the embedded one: pass "
            "--tokenizer DIR (its tokenizer, with its chat template), or --no-check to trust "
            "the token view unchecked"
        )
    if tokenizer not in (None, "embedded"):
        return TokenizerRenderer.load(tokenizer)
    from envlab.models.local import shared_engine
    from envlab.models.weights import smollm2_path

    engine = shared_engine(smollm2_path(), model_id=SMOLLM2_MODEL_ID)
    if agent.weights_hash and agent.weights_hash != engine.weights_hash:
        raise ConfigError(
            f"{run.path} was made with weights {agent.weights_hash}, the installed embedded model "
            f"is {engine.weights_hash}: pass --tokenizer DIR for the run's model"
        )
    return EmbeddedRenderer(engine)


@dataclass(slots=True, frozen=True)
class Drift:
    """Where an episode's token view and its re-rendered messages part."""

    episode_id: str
    turn: int
    position: int
    rendered: int
    """How many ids the messages render to (for this turn's prompt)."""
    recorded: int
    """How many the model got."""
    detail: str = ""

    def describe(self) -> str:
        if self.detail:
            return f"episode {self.episode_id} turn {self.turn}: {self.detail}"
        return (
            f"episode {self.episode_id} turn {self.turn}: the recorded messages render to "
            f"{self.rendered} ids, the model got {self.recorded}; first difference at position "
            f"{self.position}"
        )


def tool_choices(
    traj: Trajectory, n_turns: int
) -> tuple[list[dict[str, Any]] | None, list[str | None]]:
    """The tools the requests carried and each turn's ``tool_choice``, from the agent spec."""
    harness = traj.agent.harness
    native = not harness.startswith("tool-calling/text") and bool(traj.tools)
    if not native:
        return None, [None] * n_turns
    choice = str(traj.agent.sampling.get("tool_choice") or "")
    m = _REQUIRED.search(choice)
    required = int(m.group(1)) if m else 0
    return traj.tools, ["required" if k < required else None for k in range(n_turns)]


def first_difference(a: list[int], b: list[int]) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def check_episode(traj: Trajectory, renderer: Renderer) -> Drift | None:
    """The first turn whose prompt the messages do not re-render to, or ``None``."""
    tv = traj.tokens
    assert tv is not None
    turns = [s.message_index for s in traj.steps if s.message_index is not None]
    if len(turns) != len(tv.turn_starts):
        return Drift(
            traj.episode_id, min(len(turns), len(tv.turn_starts)), 0, 0, 0,
            f"{len(turns)} model turns in the messages, {len(tv.turn_starts)} in the token view",
        )  # fmt: skip
    tools, choices = tool_choices(traj, len(turns))
    for k, index in enumerate(turns):
        got = renderer.prompt_ids(traj.messages[:index], tools, choices[k])
        want = tv.turn_prompt(k)
        if got != want:
            return Drift(traj.episode_id, k, first_difference(got, want), len(got), len(want))
    return None


@dataclass(slots=True)
class DriftReport:
    """What ``envlab export --check`` found in a run."""

    renderer: str
    n_episodes: int = 0
    n_unscored: int = 0
    n_no_tokens: int = 0
    n_checked: int = 0
    n_turns: int = 0
    drifts: list[Drift] = field(default_factory=list)

    @property
    def drift_rate(self) -> float | None:
        """Share of the checked episodes with a drift (``None`` when none was checked)."""
        return len(self.drifts) / self.n_checked if self.n_checked else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "renderer": self.renderer,
            "n_episodes": self.n_episodes,
            "n_unscored": self.n_unscored,
            "n_no_tokens": self.n_no_tokens,
            "n_checked": self.n_checked,
            "n_turns": self.n_turns,
            "n_drifted": len(self.drifts),
            "drift_rate": self.drift_rate,
            "drifts": [_drift_dict(d) for d in self.drifts],
        }


def _drift_dict(d: Drift) -> dict[str, Any]:
    return {
        "episode_id": d.episode_id,
        "turn": d.turn,
        "position": d.position,
        "rendered": d.rendered,
        "recorded": d.recorded,
        "message": d.describe(),
    }


def checked_episodes(
    run: RunDir, renderer: Renderer, report: DriftReport
) -> Iterator[tuple[Trajectory, Drift | None]]:
    """Every scored episode with a token view, with its drift (or ``None``); counts into
    ``report`` as it goes."""
    for traj in run.trajectories():
        report.n_episodes += 1
        if not traj.scored:
            report.n_unscored += 1
            continue
        if traj.tokens is None or not traj.tokens.turn_starts:
            report.n_no_tokens += 1
            continue
        report.n_checked += 1
        report.n_turns += len(traj.tokens.turn_starts)
        drift = check_episode(traj, renderer)
        if drift is not None:
            report.drifts.append(drift)
        yield traj, drift


def check_run(run: RunDir, renderer: Renderer) -> DriftReport:
    """The drift of every scored episode with a token view in ``run``."""
    report = DriftReport(renderer.name)
    for _ in checked_episodes(run, renderer, report):
        pass
    return report
