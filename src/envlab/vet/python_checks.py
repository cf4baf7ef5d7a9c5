"""Checks that look across tasks: leaks and trivial strategies of answer-matching (Python)
environments, trainability with a real agent, and statistical adequacy."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from envlab.core import Task
from envlab.envs.answers import answer_text
from envlab.measure import is_pass
from envlab.vet.checks import PASS_THRESHOLD, TOO_EASY, TOO_HARD, TaskEvidence, _scored, result
from envlab.vet.leak import LABEL_RE, _token_re, is_trivial, normalize
from envlab.vet.model import CheckResult, EnvCheck
from envlab.vet.trivial import trivial_strategies

LEAK_ALPHA = 0.01
"""Significance of the one-sided test that answers appear in prompts more than by chance."""
LEAK_MIN_RATE = 0.5
"""A leak is systematic: at least this share of the distinctive answers is in their prompt,
and its place is marked in at least this share of those prompts."""
PLACE_CHARS = 12
"""Characters of context on each side that mark an answer's place in its prompt."""


@dataclass(slots=True)
class PythonFindings:
    leak: dict[str, CheckResult] = field(default_factory=dict)
    trivial: dict[str, CheckResult] = field(default_factory=dict)
    env_checks: list[EnvCheck] = field(default_factory=list)


def _in_prompt(answer: str, prompt: str) -> bool:
    return bool(answer) and bool(_token_re(normalize(answer)).search(normalize(prompt)))


def _places(answer: str, prompt: str) -> set[str]:
    """Every place the answer stands in the prompt, as the text just before it (``<``) and
    just after it (``>``, ``^``/``$`` at the ends), and ``label`` when its line labels it
    (``answer:``, ``expected``)."""
    hay, ndl = normalize(prompt), normalize(answer)
    out: set[str] = set()
    for m in _token_re(ndl).finditer(hay):
        out.add("<" + (hay[max(0, m.start() - PLACE_CHARS) : m.start()] or "^"))
        out.add(">" + (hay[m.end() : m.end() + PLACE_CHARS] or "$"))
        line = hay[hay.rfind("\n", 0, m.start()) + 1 : m.end() + 80]
        if LABEL_RE.search(line.replace(ndl, " ")):
            out.add("label")
    return out


def findable(answers: list[str], prompts: list[str]) -> bool:
    """Whether an agent could pick the answer out of its prompt without solving the task:
    one of its places is marked in most prompts (the same text before or after it, or a
    label). An answer that stands among the prompt's other content at a different place each
    time (a needle in a haystack, an option among options) is what the task asks to find."""
    counts: Counter[str] = Counter()
    for a, p in zip(answers, prompts, strict=True):
        counts.update(_places(a, p))
    return bool(answers) and max(counts.values(), default=0) >= LEAK_MIN_RATE * len(answers)


def answer_leak(tasks: list[Task]) -> tuple[EnvCheck, dict[str, CheckResult]]:
    """Answers in their prompts: more often than other tasks' answers are, at a marked place."""
    from scipy import stats

    answers = [answer_text(t.answer) for t in tasks]
    n = len(tasks)
    # only distinctive answers count: "0" or "12" in a prompt of numbers is a coincidence
    distinctive = [not is_trivial(a) and len(normalize(a)) >= 3 for a in answers]
    hits = [
        d and _in_prompt(a, t.prompt) for d, a, t in zip(distinctive, answers, tasks, strict=True)
    ]
    shifted = [
        n > 1 and distinctive[(i + 1) % n] and _in_prompt(answers[(i + 1) % n], tasks[i].prompt)
        for i in range(n)
    ]
    m = sum(distinctive)
    k, k0 = sum(hits), sum(shifted)
    p_value = (
        float(stats.fisher_exact([[k, m - k], [k0, m - k0]], alternative="greater")[1])
        if m
        else 1.0
    )
    hit_tasks = [(a, t.prompt) for a, t, h in zip(answers, tasks, hits, strict=True) if h]
    marked = findable([a for a, _ in hit_tasks], [p for _, p in hit_tasks])
    # few answers cannot reach significance: then only when no other task's answer is there
    enough = p_value < LEAK_ALPHA or (m < 5 and k0 == 0)
    systematic = m > 0 and k / m >= LEAK_MIN_RATE and enough and marked
    env = EnvCheck(
        name="answer_leak",
        status="fail" if systematic else "pass",
        summary=(
            f"distinctive answers appear in {k}/{m} prompts vs {k0}/{m} for other tasks' "
            f"answers (one-sided Fisher p = {p_value:.2g}), "
            + ("at a marked place" if marked else "each at an unmarked place (to be found)")
        ),
        evidence={
            "hits": k,
            "baseline_hits": k0,
            "distinctive_answers": m,
            "tasks": n,
            "p_value": p_value,
            "marked_place": marked,
        },
    )
    per: dict[str, CheckResult] = {}
    for task, hit, ans in zip(tasks, hits, answers, strict=True):
        if hit and systematic:
            per[task.id] = result(
                "answer_leak",
                "fail",
                "the prompt contains the answer",
                hits=[{"where": "prompt", "needle": ans[:200], "match": "exact"}],
            )
        elif hit:
            per[task.id] = result(
                "answer_leak",
                "warn",
                "the answer appears in the prompt, where the task asks to find it or no more "
                "often than chance across tasks",
                needle=ans[:200],
            )
        else:
            per[task.id] = result("answer_leak", "pass", "the answer is not in the prompt")
    return env, per


def python_env_findings(
    tasks: list[Task], evidence: dict[str, TaskEvidence], strategies: list[str] | None = None
) -> PythonFindings:
    f = PythonFindings()
    leak_env, f.leak = answer_leak(tasks)
    f.env_checks.append(leak_env)
    trivial_env, f.trivial = trivial_strategies(tasks, evidence, strategies)
    f.env_checks.append(trivial_env)
    return f


@dataclass(slots=True)
class Trainability:
    per_task: dict[str, CheckResult]
    env_check: EnvCheck


def trainability(
    tasks: list[Task], evidence: dict[str, TaskEvidence], enabled: bool, group_size: int
) -> Trainability:
    if not enabled:
        na = result("trainability", "n/a", "no agent given (--agent); trainability not measured")
        return Trainability(
            {t.id: na for t in tasks},
            EnvCheck(name="trainability", status="n/a", summary="skipped: no agent"),
        )
    per: dict[str, CheckResult] = {}
    stats_rows = {}
    all_scored: list[float] = []
    infra = total = 0
    for t in tasks:
        trajs = evidence[t.id].by_probe.get("agent", [])
        total += len(trajs)
        infra += sum(not tr.scored for tr in trajs)
        rewards = _scored(trajs)
        all_scored += rewards
        p = sum(is_pass(r, PASS_THRESHOLD) for r in rewards) / len(rewards) if rewards else None
        stats_rows[t.id] = (rewards, p)
    overall = (
        sum(is_pass(r, PASS_THRESHOLD) for r in all_scored) / len(all_scored) if all_scored else 0.0
    )
    any_variance = any(len(set(r)) > 1 for r, _ in stats_rows.values())
    weak = overall == 0.0 and not any_variance
    dead_count = 0
    for t in tasks:
        rewards, p = stats_rows[t.id]
        if len(rewards) < 2:
            per[t.id] = result(
                "trainability",
                "warn",
                f"{len(rewards)} scored agent episode(s): a group needs 2 or more to judge",
                rewards=rewards,
            )
            continue
        dead = len(set(rewards)) == 1
        dead_count += dead
        p_dead = (p**group_size + (1 - p) ** group_size) if p is not None else None
        band = (
            "too easy"
            if p is not None and p >= TOO_EASY
            else ("too hard" if p is not None and p <= TOO_HARD else "in band")
        )
        ev = {
            "rewards": rewards,
            "pass_rate": p,
            "dead_group": dead,
            "p_dead_at_G": None if p_dead is None else round(p_dead, 4),
            "G": group_size,
            "band": band,
        }
        if dead and weak:
            per[t.id] = result(
                "trainability",
                "warn",
                "every sample failed, and the agent solves nothing in this environment: "
                "too weak to judge; vet with a stronger --agent",
                **ev,
            )
        elif dead:
            per[t.id] = result(
                "trainability",
                "fail",
                f"all {len(rewards)} samples got {rewards[0]:g}: a dead GRPO group ({band}); "
                f"P(dead) at G={group_size} is {p_dead:.2f}",
                **ev,
            )
        else:
            per[t.id] = result(
                "trainability",
                "pass",
                f"pass rate {p:.0%}, P(dead) at G={group_size} {p_dead:.2f} ({band})",
                **ev,
            )
    env = EnvCheck(
        name="trainability",
        status="warn" if weak or infra else "pass",
        summary=(
            f"agent pass rate {overall:.0%}; {dead_count}/{len(tasks)} dead groups; "
            f"{infra}/{total} episodes not scored (infra or env errors)"
            + ("; the agent solves nothing here: too weak to judge" if weak else "")
        ),
        evidence={
            "pass_rate": overall,
            "dead_groups": dead_count,
            "tasks": len(tasks),
            "infra_or_env_errors": infra,
            "episodes": total,
            "G": group_size,
        },
    )
    return Trainability(per, env)


def adequacy(
    tasks: list[Task], evidence: dict[str, TaskEvidence], enabled: bool, cfg: object
) -> EnvCheck:
    """Minimum detectable difference between two agents at 80% power, alpha 0.05."""
    from envlab.measure.power import (
        VarianceComponents,
        minimum_detectable_difference,
        variance_components,
    )

    n = len(tasks)
    k = getattr(cfg, "samples", 1) if enabled else 1
    groups = (
        {t.id: _scored(evidence[t.id].by_probe.get("agent", [])) for t in tasks} if enabled else {}
    )
    source = "the agent's rewards"
    try:
        var = variance_components({k_: v for k_, v in groups.items() if v})
    except ValueError:
        var = VarianceComponents(between=0.25, within=0.0)
        source = "worst case for 0/1 rewards (variance 0.25)"
    if var.between == 0 and var.within == 0:
        var = VarianceComponents(between=0.25, within=0.0)
        source = "worst case for 0/1 rewards (variance 0.25): the agent's rewards did not vary"
    if n < 1:
        return EnvCheck(name="adequacy", status="n/a", summary="no tasks")
    # a paired comparison of two agents: the variance of a difference is about twice one run's
    paired = VarianceComponents(between=2 * var.between, within=2 * var.within)
    mdd = minimum_detectable_difference(n, paired, k=max(1, k))
    status = "pass" if mdd <= 0.05 else "warn"
    return EnvCheck(
        name="adequacy",
        status=status,
        summary=(
            f"with {n} tasks x {k} samples, two agents must differ by {100 * mdd:.1f} points to be "
            "told apart (80% power, alpha 0.05, paired)"
        ),
        evidence={
            "tasks": n,
            "samples": k,
            "mdd": mdd,
            "variance_between": var.between,
            "variance_within": var.within,
            "variance_source": source,
        },
    )
