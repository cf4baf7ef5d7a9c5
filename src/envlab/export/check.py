"""Token-exactness: does an episode's token view match what its recorded messages re-render to?

For every model turn ``k`` the model's view of the messages before the reply (``views``: what
the chat template was given) is rendered with the model's chat template and tokenizer, plus the
turn's prefill, and compared with ``tokens.turn_prompt(k)``, the prompt ids the model actually
got. A trainer that re-tokenizes the exported rows sees exactly those ids only when they match;
a mismatch is a *drift*, named by episode, turn and the first position that differs.

Renderers (``renderer_for``):

- ``embedded``: envlab's own engine (SmolLM2 GGUF, llama.cpp or torch: the file's tokenizer
  either way): its chat template, rendered as ``envlab serve-model`` renders a request;
- a tokenizer directory (transformers, ``local_files_only``): ``apply_chat_template(messages,
  tools=..., add_generation_prompt=True)`` then ``encode(add_special_tokens=False)``, as vLLM,
  SGLang and the trainers render a chat.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from envlab.core import ConfigError, Trajectory
from envlab.export.views import ModelView, model_view
from envlab.runs import RunDir


class Renderer(Protocol):
    name: str

    def text(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        """The chat template over ``messages`` (and ``tools``), with the generation prompt."""
        ...

    def ids(self, text: str) -> list[int]:
        """``text`` tokenized as the server tokenized the prompt (no special tokens added)."""
        ...


class EmbeddedRenderer:
    """The embedded SmolLM2 engine's chat template and tokenizer. The view it renders is the
    engine's (``views``: tools already written into the messages), so it gets no ``tools``."""

    name = "embedded"

    def __init__(self, engine: Any) -> None:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        self.engine = engine
        # as ``models.prompt.ChatTemplate`` compiles it (its render also rewrites the tools,
        # which the view has done already)
        env = ImmutableSandboxedEnvironment(trim_blocks=False, lstrip_blocks=False)
        self._template = env.from_string(engine.template.source)

    def text(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        assert not tools, "the engine's view carries its tools in the messages"
        return str(self._template.render(messages=messages, add_generation_prompt=True))

    def ids(self, text: str) -> list[int]:
        return list(self.engine.tokenize(text))


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

    def text(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        return str(
            self.tokenizer.apply_chat_template(
                messages, tools=tools or None, add_generation_prompt=True, tokenize=False
            )
        )

    def ids(self, text: str) -> list[int]:
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


def first_difference(a: list[int], b: list[int]) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def first_prompt(view: ModelView, renderer: Renderer, recorded: list[int]) -> tuple[int, str]:
    """Where the first turn's prompt ends, and its text: the view's prompt rendered with the
    generation prompt. A turn-0 prefill (a forced tool call) is not part of it: its ids start the
    completion. ``len(recorded)`` (the recorded boundary) when the rendered prompt is not a prefix
    of the recorded ids (a drift the check names)."""
    text = renderer.text(view.prompt(), view.tools)
    if not view.prefills or not view.prefills[0]:
        return len(recorded), text
    ids = renderer.ids(text)
    return (len(ids) if recorded[: len(ids)] == ids else len(recorded)), text


def check_episode(traj: Trajectory, renderer: Renderer) -> Drift | None:
    """The first turn whose prompt the model's view does not re-render to, or ``None``."""
    tv = traj.tokens
    assert tv is not None
    view = model_view(traj)
    if len(view.turns) != len(tv.turn_starts):
        n, m = len(view.turns), len(tv.turn_starts)
        return Drift(
            traj.episode_id, min(n, m), 0, 0, 0,
            f"{n} model turns in the messages, {m} in the token view",
        )  # fmt: skip
    for k, index in enumerate(view.turns):
        text = renderer.text(view.messages[:index], view.tools)
        got = renderer.ids(text + view.prefills[k])
        want = tv.turn_prompt(k)
        if got != want:
            return Drift(traj.episode_id, k, first_difference(got, want), len(got), len(want))
        if k == 0 and view.prefills[0] and first_prompt(view, renderer, want)[0] == len(want):
            return Drift(
                traj.episode_id, 0, 0, len(got), len(want),
                "the forced tool-call prefill does not start at a token boundary",
            )  # fmt: skip
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
