"""``export_run``: a run directory into one file a trainer reads (see ``formats``).

Two passes over ``trajectories.jsonl``, each one line at a time: the first groups the scored
episodes (``groups.scan_run``) and decides which go out, the second writes them, each from the
model's view of its messages (``views``). Unscored episodes (``infra_error``, ``env_error``)
never reach a row; they are counted. For ``tokens``, each episode's token view is first checked
against its re-rendered messages (``check``): a drift refuses the export, naming the episode and
the turn, unless asked to mark it instead. An export that finds no row writes no file and says
why (``empty``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from envlab.core import ConfigError, EnvlabError, Trajectory
from envlab.export import formats
from envlab.export.check import Drift, Renderer, check_episode, first_prompt
from envlab.export.empty import EmptyExportError, why_empty
from envlab.export.groups import DEFAULT_EPS, Group, RunScan, scan_run
from envlab.export.verl import verl_row
from envlab.export.views import model_view
from envlab.export.writers import RowWriter
from envlab.runs import RunDir

DriftPolicy = Literal["refuse", "mark", "off"]


class TokenDriftError(EnvlabError):
    """Episodes whose token view differs from what their messages re-render to."""


@dataclass(slots=True, kw_only=True)
class ExportOptions:
    format: formats.Format
    min_reward: float = 1.0
    """``sft``: the lowest reward an exported episode may have."""
    best_per_group: bool = True
    """``sft``: only the best episode of each group (else every one at or above min_reward)."""
    min_margin: float = 0.5
    """``dpo``: the least reward difference between chosen and rejected (always > 0)."""
    eps: float = DEFAULT_EPS
    drop_dead: bool = False
    """``grpo``/``tokens``/``verl``: leave out groups with no reward variance (else marked)."""
    drift: DriftPolicy = "refuse"
    """``tokens``: what an episode whose token view drifts does to the export."""


@dataclass(slots=True)
class ExportReport:
    format: str
    out: str
    n_episodes: int = 0
    unscored: dict[str, int] = field(default_factory=dict)
    n_groups: int = 0
    dead_groups: int = 0
    n_rows: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    """Scored episodes (or, for dpo, groups) not exported, by reason."""
    drifts: list[Drift] = field(default_factory=list)
    checked: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "out": self.out,
            "n_episodes": self.n_episodes,
            "n_unscored": sum(self.unscored.values()),
            "unscored": dict(self.unscored),
            "n_groups": self.n_groups,
            "dead_groups": self.dead_groups,
            "n_rows": self.n_rows,
            "skipped": dict(self.skipped),
            "checked": self.checked,
            "drifted": [d.describe() for d in self.drifts],
        }


def _select_sft(scan: RunScan, opts: ExportOptions, report: ExportReport) -> set[str]:
    chosen: set[str] = set()
    for g in scan.groups.values():
        passing = [m for m in g.members if m.reward >= opts.min_reward]
        report.skipped["below --min-reward"] += len(g.members) - len(passing)
        if opts.best_per_group and passing:
            best = min(passing, key=lambda m: (-m.reward, m.sample_index))
            report.skipped["not the best of its group"] += len(passing) - 1
            passing = [best]
        chosen.update(m.episode_id for m in passing)
    return chosen


def _select_pairs(scan: RunScan, opts: ExportOptions, report: ExportReport) -> dict[str, str]:
    """Episode id -> group id of every episode in a chosen/rejected pair."""
    needed: dict[str, str] = {}
    for g in scan.groups.values():
        if len(g.members) < 2:
            report.skipped["group of one (no pair)"] += 1
            continue
        best, worst = g.best(), g.worst()
        margin = best.reward - worst.reward
        if margin <= 0 or margin < opts.min_margin:
            report.skipped["margin below --min-margin"] += 1
            continue
        needed[best.episode_id] = needed[worst.episode_id] = g.group_id
    return needed


def _select_groups(scan: RunScan, opts: ExportOptions, report: ExportReport) -> set[str]:
    chosen: set[str] = set()
    for g in scan.groups.values():
        if g.dead and opts.drop_dead:
            report.skipped["in a dead group (--drop-dead)"] += len(g.members)
            continue
        for m in g.members:
            if opts.format == "tokens" and not m.has_tokens:
                report.skipped["no token view"] += 1
            else:
                chosen.add(m.episode_id)
    return chosen


def _select_tasks(scan: RunScan, opts: ExportOptions, report: ExportReport) -> set[str]:
    """``verl``: one episode per group (its lowest sample index), the task's prompt."""
    chosen: set[str] = set()
    for g in scan.groups.values():
        if g.dead and opts.drop_dead:
            report.skipped["in a dead group (--drop-dead)"] += 1
            continue
        chosen.add(min(g.members, key=lambda m: m.sample_index).episode_id)
    return chosen


def _write_pairs(run: RunDir, needed: dict[str, str], w: RowWriter, report: ExportReport) -> None:
    held: dict[str, dict[str, Trajectory]] = {}
    for traj in run.trajectories():
        gid = needed.get(traj.episode_id)
        if gid is None:
            continue
        pair = held.setdefault(gid, {})
        pair[traj.episode_id] = traj
        if len(pair) < 2:
            continue
        a, b = held.pop(gid).values()
        chosen, rejected = (a, b) if (a.reward or 0.0) > (b.reward or 0.0) else (b, a)
        row = formats.dpo_row(chosen, rejected, (model_view(chosen), model_view(rejected)))
        if row is None:
            report.skipped["chosen and rejected start from different prompts"] += 1
        else:
            w.write(row)


def _write_rows(
    run: RunDir,
    scan: RunScan,
    chosen: set[str],
    opts: ExportOptions,
    renderer: Renderer | None,
    w: RowWriter,
    report: ExportReport,
) -> None:
    order = {gid: i for i, gid in enumerate(scan.groups)}
    for traj in run.trajectories():
        if traj.episode_id not in chosen:
            continue
        group = scan.group_of(traj.episode_id)
        assert group is not None
        view = model_view(traj)
        if opts.format == "sft":
            w.write(formats.sft_row(traj, view))
        elif opts.format == "verl":
            w.write(verl_row(traj, view, group, w.n_rows, run.info))
        elif opts.format == "grpo":
            text = None
            if renderer is not None and traj.tokens is not None:
                text = renderer.text(view.prompt(), view.tools)
            w.write(formats.grpo_row(traj, view, group, opts.eps, text))
        else:
            w.write(_tokens_row(traj, group, order[group.group_id], opts, renderer, report))


def _tokens_row(
    traj: Trajectory,
    group: Group,
    group_index: int,
    opts: ExportOptions,
    renderer: Renderer | None,
    report: ExportReport,
) -> dict[str, Any]:
    drift = None
    if renderer is not None and opts.drift != "off":
        report.checked += 1
        drift = check_episode(traj, renderer)
        if drift is not None:
            report.drifts.append(drift)
    view = model_view(traj)
    assert traj.tokens is not None
    recorded = traj.tokens.turn_prompt(0)
    prompt_len, text = len(recorded), None
    if renderer is not None:
        prompt_len, text = first_prompt(view, renderer, recorded)
    elif view.prefills and view.prefills[0]:
        raise ConfigError(
            f"episode {traj.episode_id}: its first turn was prefilled by the engine (a forced "
            "tool call), and splitting that prefill off the prompt needs the model's tokenizer: "
            "export tokens with the embedded renderer (--tokenizer embedded)"
        )
    return formats.tokens_row(
        traj, view, group, group_index=group_index, prompt_len=prompt_len, prompt_text=text,
        eps=opts.eps, drift=drift and drift.describe(),
    )  # fmt: skip


def export_run(
    run: RunDir, out: str | Path, opts: ExportOptions, renderer: Renderer | None = None
) -> ExportReport:
    """Write ``run``'s episodes to ``out`` (``.jsonl`` or ``.parquet``) in ``opts.format``.

    ``renderer`` (the model's chat template and tokenizer; ``None``: none) checks the token
    views of ``tokens`` (unless ``opts.drift == "off"``) and renders ``prompt_text`` of
    ``tokens`` and ``grpo``. With ``opts.drift == "refuse"`` a drift raises ``TokenDriftError``;
    an export with no row raises ``EmptyExportError``; neither writes a file."""
    scan = scan_run(run)
    report = ExportReport(opts.format, str(out), n_episodes=scan.n_episodes)
    report.unscored = dict(scan.unscored)
    report.n_groups, report.dead_groups = len(scan.groups), len(scan.dead_groups)
    if opts.format not in ("tokens", "grpo"):
        renderer = None
    if opts.format == "verl" and not str(out).lower().endswith(".parquet"):
        raise ConfigError(f"--out {out}: verl reads its RL dataset from Parquet; end it .parquet")
    with RowWriter(out) as w:
        if opts.format == "dpo":
            _write_pairs(run, _select_pairs(scan, opts, report), w, report)
        else:
            pick = {"sft": _select_sft, "verl": _select_tasks}.get(opts.format, _select_groups)
            _write_rows(run, scan, pick(scan, opts, report), opts, renderer, w, report)
        if report.drifts and opts.drift == "refuse":
            raise TokenDriftError(_refusal(report.drifts, report.checked))
        if w.n_rows == 0:
            raise EmptyExportError(why_empty(report, opts))
        report.n_rows = w.n_rows
    return report


def _refusal(drifts: list[Drift], checked: int) -> str:
    shown = "; ".join(d.describe() for d in drifts[:3])
    more = f" (and {len(drifts) - 3} more)" if len(drifts) > 3 else ""
    return (
        f"{len(drifts)} of {checked} episodes have a token view that differs from their "
        f"re-rendered messages: {shown}{more}. Nothing was written. Export them marked with "
        "--mark-drift (column token_drift), or skip the check with --no-check."
    )
