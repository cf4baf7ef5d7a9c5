"""Hashed features of a decision prompt (the ``triage`` ticket format), for the decision model.

A prompt is a header line, ``key: value`` lines, an ``Options: a, b, c`` line and a closing
instruction::

    service: checkout
    severity: sev2
    customer_tier: enterprise
    error_codes: E503, DB_TIMEOUT        (or "none")
    time: 03:40
    text: <one line of free text>

    Options: page_oncall, open_incident, queue_team, auto_remediate, close_duplicate

The features are names (``severity=sev2``, ``error_codes=e503``, ``tod=night``,
``w:timeout``, ``b:db timeout``, ``customer_tier=enterprise&severity=sev2``...) hashed into
``dim`` buckets with a stable hash (BLAKE2b of the UTF-8 name, never Python's salted
``hash()``): the same prompt gives the same indices in every process.

``decision_samples`` reads a batch of decision trajectories (prompt, chosen option, behaviour
logprob, group-relative advantage) into the flat lists the learner's step turns into tensors.
No torch here: indices are plain ints.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import combinations, pairwise

from envlab.core import ConfigError, Trajectory
from envlab.train.learner import Group, group_advantages

FEATURES_VERSION = "triage-hash/1"
"""Bumped whenever the feature names change: a checkpoint records the version it was trained on."""

OPTIONS_PREFIX = "Options:"
TEXT_FIELDS = frozenset({"text"})
"""Fields read as free text (unigrams and bigrams), not as one categorical value."""
LIST_FIELDS = frozenset({"error_codes"})
"""Fields holding a comma-separated list: one feature per element."""
TIME_FIELDS = frozenset({"time"})
"""Fields holding ``HH:MM``: a time-of-day bucket and the hour."""

_FIELD = re.compile(r"^([a-z][a-z0-9_]*):\s?(.*)$")
_WORD = re.compile(r"[a-z0-9_]+")
_NONE = frozenset({"", "none", "-", "n/a"})


@dataclass(frozen=True, slots=True)
class Features:
    """A prompt as the model sees it: its options (in the prompt's order) and feature indices."""

    options: tuple[str, ...]
    indices: tuple[int, ...]
    names: tuple[str, ...]
    """The feature names hashed into ``indices`` (same order): for debugging and docs."""


def parse_options(prompt: str) -> tuple[str, ...]:
    """The option names of the prompt's ``Options:`` line, in order.

    A prompt without one (or with an empty or repeated option) is a ``ConfigError``: the
    decision model only plays environments that list their options this way."""
    for line in prompt.splitlines():
        stripped = line.strip()
        if stripped.startswith(OPTIONS_PREFIX):
            names = [o.strip() for o in stripped[len(OPTIONS_PREFIX) :].split(",")]
            options = tuple(n for n in names if n)
            if not options:
                raise ConfigError(
                    f"the prompt's {OPTIONS_PREFIX!r} line lists no options: {stripped!r}; "
                    "write it as 'Options: a, b, c'"
                )
            if len(set(options)) != len(options):
                raise ConfigError(f"the prompt's options repeat a name: {stripped!r}")
            return options
    head = prompt.strip().splitlines()[:2]
    raise ConfigError(
        f"the prompt has no {OPTIONS_PREFIX!r} line (it starts {head!r}); the decision model "
        "plays only environments whose prompt lists its options as 'Options: a, b, c' "
        "(such as triage)"
    )


def parse_fields(prompt: str) -> dict[str, str]:
    """The prompt's ``key: value`` lines (lower-case keys), the ``Options:`` line excluded."""
    fields: dict[str, str] = {}
    for line in prompt.splitlines():
        m = _FIELD.match(line.strip())
        if m and m.group(1) != OPTIONS_PREFIX[:-1].lower():
            fields.setdefault(m.group(1), m.group(2).strip())
    return fields


def time_bucket(value: str) -> tuple[str, str]:
    """``(bucket, hour)`` of ``HH:MM``: night 0-6, morning 6-12, afternoon 12-18, evening
    18-24; ``("?", "?")`` for anything else."""
    m = re.match(r"^\s*(\d{1,2}):(\d{2})", value)
    if not m or int(m.group(1)) > 23:
        return "?", "?"
    hour = int(m.group(1))
    bucket = ("night", "morning", "afternoon", "evening")[hour // 6]
    return bucket, f"{hour:02d}"


def feature_names(fields: dict[str, str]) -> list[str]:
    """Every feature name of a ticket's fields (see the module's docstring for the scheme)."""
    names = ["bias"]
    atoms: list[str] = []  # the structured values, crossed pairwise below
    for key, value in fields.items():
        if key in TEXT_FIELDS:
            words = _WORD.findall(value.lower())
            names += [f"w:{w}" for w in words]
            names += [f"b:{a} {b}" for a, b in pairwise(words)]
        elif key in LIST_FIELDS:
            items = [v.strip() for v in value.split(",")]
            items = [v for v in items if v.lower() not in _NONE]
            atoms += [f"{key}={v.lower()}" for v in items] or [f"{key}=none"]
            names.append(f"{key}#={min(len(items), 3)}")
        elif key in TIME_FIELDS:
            bucket, hour = time_bucket(value)
            atoms.append(f"tod={bucket}")
            names.append(f"hour={hour}")
        else:
            atoms.append(f"{key}={value.lower()}")
    names += atoms
    names += [f"{a}&{b}" for a, b in combinations(sorted(set(atoms)), 2)]
    return names


def stable_index(name: str, dim: int) -> int:
    """The bucket of a feature name: BLAKE2b (8 bytes) modulo ``dim``, the same everywhere."""
    digest = hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % dim


@lru_cache(maxsize=65536)
def featurize(prompt: str, dim: int) -> Features:
    """The options and hashed feature indices of one prompt (cached: groups repeat prompts)."""
    if dim < 1:
        raise ConfigError(f"the feature dimension must be >= 1, got {dim}")
    options = parse_options(prompt)
    names = tuple(feature_names(parse_fields(prompt)))
    return Features(options, tuple(stable_index(n, dim) for n in names), names)


def option_order(prompt_options: Sequence[str], model_options: Sequence[str]) -> list[int]:
    """For each option of the prompt, its index in the model's output."""
    if set(prompt_options) != set(model_options) or len(prompt_options) != len(model_options):
        raise ConfigError(
            f"the prompt's options {list(prompt_options)} are not the options the decision model "
            f"was trained on {list(model_options)}; train a model for this environment"
        )
    return [list(model_options).index(o) for o in prompt_options]


@dataclass(slots=True)
class Samples:
    """The flat arrays of a batch's samples that acted: feature indices with their offsets per
    sample, the chosen option (model index), behaviour logprob and advantage; and the rewards
    of every sample, those without an action included (``no_action`` counts them)."""

    indices: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    choices: list[int] = field(default_factory=list)
    behaviour: list[float] = field(default_factory=list)
    advantages: list[float] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    dead_groups: int = 0
    no_action: int = 0
    """Graded samples with no action (a timeout or agent error before the agent acted): their
    reward is in ``rewards`` and in their group's advantages, but there is no choice to learn."""


def decision_samples(
    batch: Sequence[Group], options: Sequence[str], dim: int, *, scale: bool = True
) -> Samples:
    """The samples of a batch of decision groups, with their group-relative advantages.

    A graded trajectory without a step (the agent timed out or failed before it acted) keeps
    its reward in its group, so it moves the others' advantages, but adds no sample to learn
    from: it is counted in ``no_action``. Any other trajectory must be one ``read_decision``
    reads (an option the decision agent chose, with its logprob), or this is a ``ConfigError``."""
    out = Samples()
    for group in batch:
        trajs = list(group.trajectories)
        for t in trajs:
            if not t.scored:
                raise ConfigError(
                    f"trajectory {t.episode_id!r} ({t.status.value}, reward {t.reward}) has no "
                    "valid grade: only scored samples may enter a Group"
                )
        rewards = [float(t.reward) for t in trajs]  # type: ignore[arg-type]
        out.rewards += rewards
        if group.dead:
            out.dead_groups += 1
        for traj, adv in zip(trajs, group_advantages(rewards, scale=scale), strict=True):
            if not traj.steps:  # the agent's failure, graded: no choice to reinforce
                out.no_action += 1
                continue
            prompt, choice, logprob = read_decision(traj, options)
            out.offsets.append(len(out.indices))
            out.indices += featurize(prompt, dim).indices
            out.choices.append(choice)
            out.behaviour.append(logprob)
            out.advantages.append(adv)
    return out


def read_decision(traj: Trajectory, options: Sequence[str]) -> tuple[str, int, float]:
    """``(prompt, index of the chosen option in options, behaviour logprob)`` of a decision
    trajectory; anything else (no prompt, no action, an answer that is not an option, no
    logprob) is a ``ConfigError``: the learner never skips a sample silently.
    (``decision_samples`` counts a graded trajectory without a step as ``no_action`` before
    asking this: its reward still counts in its group.)"""
    where = f"trajectory {traj.episode_id or traj.task_id!r}"
    prompt = next((m.get("content") for m in traj.messages if m.get("role") == "user"), None)
    if not isinstance(prompt, str):
        raise ConfigError(f"{where} has no user message: no prompt to learn from")
    if not traj.steps:
        raise ConfigError(f"{where} ({traj.status.value}) has no action to learn from")
    action = traj.steps[-1].action
    prompt_options = parse_options(prompt)
    order = option_order(prompt_options, options)
    if action.text not in prompt_options:
        raise ConfigError(
            f"{where}: the action {action.text[:80]!r} is not one of the options "
            f"{list(prompt_options)}; was it produced by the decision agent?"
        )
    i = prompt_options.index(action.text)
    if action.info.get("choice", i) != i:
        raise ConfigError(
            f"{where}: action.info['choice'] = {action.info.get('choice')!r} but the text names "
            f"option {i} ({action.text!r})"
        )
    logprob = action.info.get("logprob")
    if (
        isinstance(logprob, bool)
        or not isinstance(logprob, int | float)
        or not math.isfinite(logprob)
        or logprob > 1e-6
    ):
        raise ConfigError(
            f"{where}: no valid behaviour logprob in action.info (got {logprob!r}); the "
            "decision learner learns only from episodes its own agents played"
        )
    return prompt, order[i], float(logprob)


__all__ = [
    "FEATURES_VERSION",
    "Features",
    "Samples",
    "decision_samples",
    "feature_names",
    "featurize",
    "option_order",
    "parse_fields",
    "parse_options",
    "read_decision",
    "stable_index",
    "time_bucket",
]
