"""``envlab tour``: what envlab is for, in one short run that needs nothing but its own install.

1. **vet** four tool environments, three with a flaw planted as public environments have them,
   and say which are thrown out and why;
2. **train** the small decision model on ``triage`` through the async loop;
3. **measure** it on held-out tasks against the uniform random policy, the exact optimum and the
   embedded language model (SmolLM2-135M, zero-shot), paired on the same tasks and seeds;
4. **report**: one HTML file with the vet verdicts, the training curve and every episode.

Usable from Python: ``result = await run_tour(TourConfig(out_dir=Path("runs/tour")))``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from envlab.tour.invoices import TOUR_ENVS

if TYPE_CHECKING:
    from envlab.core import AgentFactory
    from envlab.train.config import TrainResult
    from envlab.train.heldout import Contender, Heldout
    from envlab.vet.model import EnvVet


@dataclass(slots=True)
class TourConfig:
    out_dir: Path
    train_steps: int = 40
    """Learner steps of the decision model (16 groups of 8 episodes each)."""
    heldout_tasks: int = 200
    """Held-out ``triage`` tasks for the policies that cost nothing to run."""
    model_tasks: int = 8
    """Of those, the first ones the embedded model answers (its episodes are the slow part)."""
    model: bool = True
    """Measure the embedded model too (needs ``envlab[embedded]`` or ``envlab[local]``)."""
    seed: int = 0


@dataclass(slots=True)
class VetRow:
    env_id: str
    planted: str
    verdicts: dict[str, int]
    thrown_out: int
    reasons: list[str]


@dataclass(slots=True)
class TourResult:
    vet: list[VetRow]
    train: TrainResult
    heldout: Heldout
    model_heldout: Heldout | None
    report: Path
    notes: list[str] = field(default_factory=list)


Say = Callable[[str], None]


async def vet_step(cfg: TourConfig, say: Say) -> list[VetRow]:
    """Vet each tour environment with the probe agents alone (no model)."""
    from envlab.vet.runner import VetConfig, vet_environment

    rows = []
    for cls in TOUR_ENVS:
        spec = cls()
        say(f"vetting {spec.id} ({len(spec.tasks())} tasks, probe agents)")
        report = await vet_environment(
            spec, out_dir=cfg.out_dir / "vet" / spec.id, config=VetConfig(oracle_runs=2)
        )
        rows.append(_vet_row(report, cls.flaw))
    return rows


def _vet_row(report: EnvVet, planted: str) -> VetRow:
    counts = {k: v for k, v in report.verdict_counts.items() if v}
    bad = [t for t in report.tasks if t.verdict != "ok"]
    reasons: list[str] = []
    for t in bad:
        for r in t.reasons:
            if r not in reasons:
                reasons.append(r)
    return VetRow(report.env_id, planted, counts, len(bad), reasons)


async def train_step(cfg: TourConfig, say: Say) -> TrainResult:
    """The decision model on ``triage``'s train split, rollouts and learning overlapped."""
    from envlab.envs.triage import TriageEnv
    from envlab.train.decision_learner import DecisionConfig, DecisionLearner
    from envlab.train.loop import TrainConfig, train

    spec = TriageEnv()
    tasks = spec.tasks(seed=cfg.seed, split="train")
    learner = DecisionLearner.for_tasks(list(tasks), DecisionConfig(seed=cfg.seed))
    say(f"training the decision model on triage: {cfg.train_steps} steps x 16 groups x 8")
    train_cfg = TrainConfig(
        steps=cfg.train_steps, groups_per_step=16, group_size=8, concurrency=64, seed=cfg.seed
    )
    return await train(
        spec, tasks, learner, out_dir=cfg.out_dir / "train", config=train_cfg,
        command=["envlab", "tour"],
    )  # fmt: skip


def _baselines(train_dir: Path) -> list[Contender]:
    from envlab.agents import load_agent
    from envlab.train.checkpoint import latest_checkpoint
    from envlab.train.decision import decision
    from envlab.train.heldout import Contender

    ckpt = latest_checkpoint(train_dir)
    return [
        Contender("trained", decision(checkpoint=str(ckpt), greedy=True)),
        Contender("random", decision(), floor=True),
        Contender("optimum", load_agent("oracle"), best=True),
    ]


def embedded_model() -> AgentFactory:
    """SmolLM2-135M zero-shot on triage: it names one option, no tool turn."""
    from envlab.agents.model_agents import smollm2

    return smollm2(required_tool_turns=0, max_tokens=16)


async def measure_step(
    cfg: TourConfig, say: Say, train_dir: Path
) -> tuple[Heldout, Heldout | None]:
    """The held-out comparisons: the baselines on ``heldout_tasks`` tasks; then the embedded
    model against the trained policy on the first ``model_tasks`` of them."""
    from envlab.envs.triage import TriageEnv
    from envlab.train.heldout import evaluate_heldout

    spec = TriageEnv()
    held = spec.tasks(seed=cfg.seed, n=cfg.heldout_tasks, split="test")
    out = cfg.out_dir / "heldout"
    say(f"measuring trained, random and optimum on {cfg.heldout_tasks} held-out tasks")
    heldout = await _closing(
        _baselines(train_dir),
        lambda cs: evaluate_heldout(spec, held, cs, out, split="test", seed=cfg.seed),
    )
    if not cfg.model:
        return heldout, None
    few = spec.tasks(seed=cfg.seed, n=cfg.model_tasks, split="test")
    say(f"measuring the embedded SmolLM2-135M on the first {cfg.model_tasks} of them")
    from envlab.train.heldout import Contender

    contenders = [_baselines(train_dir)[0], Contender("smollm2", embedded_model())]
    model_heldout = await _closing(
        contenders,
        lambda cs: evaluate_heldout(
            spec, few, cs, cfg.out_dir / "heldout-model", split="test", seed=cfg.seed,
            concurrency=4,
        ),
    )  # fmt: skip
    return heldout, model_heldout


async def _closing(
    contenders: list[Contender], run: Callable[[list[Contender]], Awaitable[Heldout]]
) -> Heldout:
    """``run(contenders)``, then every contender's agent closed, whatever happened."""
    try:
        return await run(contenders)
    finally:
        for c in contenders:
            await c.factory.aclose()


def report_step(cfg: TourConfig, heldout: Heldout, model_heldout: Heldout | None) -> Path:
    """One HTML file: the vet verdicts, the training curve, and every held-out episode."""
    from envlab.report.html import write_report

    runs = [cfg.out_dir / "train", *(Path(r.run_dir) for r in heldout.rows)]
    if model_heldout is not None:
        runs += [Path(r.run_dir) for r in model_heldout.rows[1:]]
    vets = [cfg.out_dir / "vet" / cls.id for cls in TOUR_ENVS]
    out = cfg.out_dir / "report.html"
    write_report([*runs, *vets], out, title="envlab tour")
    return out


async def run_tour(cfg: TourConfig, say: Say = lambda _: None) -> TourResult:
    """Vet, train, measure, report, into ``cfg.out_dir`` (a new directory)."""
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    vet = await vet_step(cfg, say)
    trained = await train_step(cfg, say)
    heldout, model_heldout = await measure_step(cfg, say, trained.run_dir)
    report = report_step(cfg, heldout, model_heldout)
    return TourResult(vet, trained, heldout, model_heldout, report, list(trained.notes))
