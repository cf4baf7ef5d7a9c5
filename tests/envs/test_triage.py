from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from envlab.agents.scripted import NoopAgent, OracleAgent
from envlab.core import (
    Action,
    Agent,
    AgentClass,
    AgentSpec,
    ConfigError,
    EpisodeContext,
    Observation,
    Status,
    Task,
    ToolCall,
    Trajectory,
)
from envlab.envs import load_env
from envlab.envs import triage_rules as rules
from envlab.envs.triage import (
    OPTIONS,
    SYSTEM_PROMPT,
    TriageEnv,
    bayes_action,
    chosen_option,
    expected_optimum,
    expected_reward,
    named_options,
    parse_prompt,
    random_expected_reward,
    realized_optimum,
    realized_reward,
)
from envlab.rollout import rollout
from envlab.rollout.driver import PlannedEpisode, episode_ids, run_episodes

DESIGN_OPTIONS = ("page_oncall", "open_incident", "queue_team", "auto_remediate", "close_duplicate")


class AnswerAgent(Agent):
    """Answers every ticket the same scripted way (an attack on the gate, or one option)."""

    name = "answer"

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self._system = ""

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name=f"answer:{self.mode}", harness="scripted:answer")

    async def start(self, ctx: EpisodeContext) -> None:
        self._system = ctx.system_prompt or ""

    async def act(self, observation: Observation) -> Action:
        prompt = observation.text
        if self.mode == "tool_call":
            return Action(tool_calls=[ToolCall("route", {"option": "page_oncall"}, id="c1")])
        answers = {
            "all_options": " ".join(OPTIONS),
            "all_options_spelled": "Page-Oncall / Open Incident / queue team / AUTO_REMEDIATE "
            "/ close duplicate",
            "options_line": next(x for x in prompt.splitlines() if x.startswith("Options:")),
            "prompt": prompt,
            "system_prompt": self._system,
            "two_options": "page_oncall, or else open_incident",
            "hedge": "Either queue_team or close_duplicate, depending on the logs.",
            "empty": "",
            "spaces": "   \n ",
            "no_option": "I would escalate this to someone senior.",
        }
        return Action(text=answers.get(self.mode, self.mode))


async def _run(spec: TriageEnv, agent: Agent | type[Agent], tasks: list[Task]) -> list[Trajectory]:
    factory = AgentClass(agent) if isinstance(agent, type) else AgentClass(lambda: agent)
    plan = [
        PlannedEpisode(t, 0, episode_ids(spec.name, spec.content_hash(), t.id, 0, 0), factory)
        for t in tasks
    ]
    return await run_episodes(spec, plan, concurrency=8)


ATTACKS = [
    "all_options",
    "all_options_spelled",
    "options_line",
    "prompt",
    "system_prompt",
    "two_options",
    "hedge",
    "empty",
    "spaces",
    "no_option",
    "tool_call",
]


@pytest.mark.parametrize("mode", ATTACKS)
async def test_an_answer_that_picks_no_single_option_scores_zero(mode: str) -> None:
    spec = TriageEnv()
    tasks = list(spec.tasks(n=40, split="test"))
    trajs = await _run(spec, AnswerAgent(mode), tasks)
    assert len(trajs) == 40
    for t in trajs:
        assert t.status in (Status.OK, Status.TRUNCATED)  # the agent's doing, always scored
        assert t.scored and t.reward == 0.0
        assert t.gated_by == "one_option"
        assert t.components["one_option"] == 0.0


async def test_a_tool_call_is_not_an_answer() -> None:
    spec = TriageEnv()
    [traj] = await _run(spec, AnswerAgent("tool_call"), [spec.tasks(n=1)[0]])
    assert traj.status is Status.TRUNCATED and traj.reward == 0.0
    assert spec.new_episode().tools == []


@pytest.mark.parametrize("option", OPTIONS)
async def test_each_single_option_earns_its_cost_reward(option: str) -> None:
    spec = TriageEnv()
    tasks = list(spec.tasks(n=30, split="dev"))
    trajs = await _run(spec, AnswerAgent(f"I pick {option.replace('_', '-').upper()}."), tasks)
    for task, traj in zip(tasks, trajs, strict=True):
        assert traj.gated_by is None
        assert traj.reward == pytest.approx(realized_reward(task, option))
        assert 0.0 <= traj.reward <= 1.0


async def test_the_oracle_scores_exactly_the_computed_optimum(tmp_path: Path) -> None:
    spec = TriageEnv()
    tasks = spec.tasks(n=300, split="test")
    result = await rollout(spec, AgentClass(OracleAgent), tasks, out_dir=tmp_path / "run")
    rewards = [r.reward for r in result.records]
    assert len(rewards) == 300 and all(r is not None for r in rewards)
    mean = sum(r for r in rewards if r is not None) / len(rewards)
    assert mean == pytest.approx(realized_optimum(tasks), abs=1e-12)
    by_id = {r.task_id: r.reward for r in result.records}
    for t in tasks:
        assert by_id[t.id] == pytest.approx(realized_reward(t, bayes_action(t)))


async def test_noop_scores_zero(tmp_path: Path) -> None:
    spec = TriageEnv()
    result = await rollout(spec, AgentClass(NoopAgent), spec.tasks(n=50), out_dir=tmp_path / "r")
    assert [r.reward for r in result.records] == [0.0] * 50


def test_the_bayes_action_is_the_best_option_and_costs_move_it() -> None:
    tasks = TriageEnv().tasks(n=2000, split="train")
    moved = 0
    for t in tasks:
        best = bayes_action(t)
        values = {o: expected_reward(t, o) for o in OPTIONS}
        assert values[best] == max(values.values())
        likeliest = max(OPTIONS, key=lambda o: t.answer["posterior"][o])
        moved += values[likeliest] < values[best]
    assert moved > 50  # asymmetric costs move the decision away from the likeliest need
    assert len({bayes_action(t) for t in tasks}) == len(OPTIONS)


def test_the_random_policy_is_far_below_the_optimum() -> None:
    tasks = TriageEnv().tasks(n=2000, split="test")
    optimum, rand = expected_optimum(tasks), random_expected_reward(tasks)
    assert optimum > 0.85 and rand < 0.65 and optimum - rand > 0.25
    for option in OPTIONS:  # nor does any constant answer come near it
        const = sum(expected_reward(t, option) for t in tasks) / len(tasks)
        assert const < 0.72 * optimum
    assert abs(realized_optimum(tasks) - optimum) < 0.02  # outcomes follow the posterior


def test_the_posterior_is_a_function_of_the_prompt() -> None:
    spec = TriageEnv(noise=0.1)
    for t in spec.tasks(n=1000, split="train"):
        ticket = parse_prompt(t.prompt)
        expected = dict(zip(OPTIONS, rules.posterior(ticket, 0.1), strict=True))
        assert t.answer["posterior"] == expected
    for i in range(3000):  # the text says what the generator meant, and nothing else
        ticket, signals = rules.draw_ticket(random.Random(f"signals:{i}"))
        assert rules.read_signals(ticket.text) == signals


def test_the_prompt_has_exactly_the_designed_format() -> None:
    pattern = re.compile(
        r"\ARoute this operations ticket to exactly one of the options\.\n\n"
        r"service: [a-z]+\n"
        r"severity: sev[1-4]\n"
        r"customer_tier: (enterprise|business|free|internal)\n"
        r"error_codes: (none|[A-Z0-9_]+(, [A-Z0-9_]+)*)\n"
        r"time: ([01]\d|2[0-3]):[0-5]\d\n"
        r"text: [^\n]+\n\n"
        r"Options: page_oncall, open_incident, queue_team, auto_remediate, close_duplicate\n"
        r"Answer with exactly one option name\.\Z"
    )
    tasks = TriageEnv().tasks(n=500)
    assert OPTIONS == DESIGN_OPTIONS
    for t in tasks:
        assert pattern.match(t.prompt), t.prompt
    assert any("error_codes: none\n" in t.prompt for t in tasks)
    assert any(re.search(r"error_codes: \w+, \w+", t.prompt) for t in tasks)


def test_the_hidden_answer_never_reaches_the_agent() -> None:
    for t in TriageEnv().tasks(n=1000, split="dev"):
        ticket_part = t.prompt.split("\n\nOptions:")[0]
        assert named_options(ticket_part) == []  # the ticket names no option
        assert "posterior" not in t.prompt and "outcome" not in t.prompt
        assert set(t.public_view()) == {"id", "prompt", "split"}
    assert not re.search(r"\d", SYSTEM_PROMPT)  # options explained; no costs, no numbers
    assert all(o in SYSTEM_PROMPT for o in OPTIONS)


def test_tasks_are_deterministic_and_splits_disjoint() -> None:
    spec = TriageEnv()
    a, b = spec.tasks(seed=3, n=200), spec.tasks(seed=3, n=200)
    assert [t.model_dump() for t in a] == [t.model_dump() for t in b]
    assert [t.prompt for t in spec.tasks(seed=4, n=200)] != [t.prompt for t in a]
    splits = {s: spec.tasks(n=1000, split=s) for s in ("train", "dev", "test")}
    for s, ts in splits.items():
        assert {t.split for t in ts} == {s}
    prompts = [{t.prompt for t in ts} for ts in splits.values()]
    ids = [{t.id for t in ts} for ts in splits.values()]
    for i in range(3):
        for j in range(i + 1, 3):
            assert not prompts[i] & prompts[j] and not ids[i] & ids[j]
    with pytest.raises(ConfigError, match="triage has splits train, dev, test"):
        spec.tasks(split="validation")


def test_costs_are_asymmetric_and_rewards_in_range() -> None:
    page, incident = OPTIONS.index("page_oncall"), OPTIONS.index("open_incident")
    queue = OPTIONS.index("queue_team")
    cost = rules.COST
    assert all(cost[i][i] == 0 for i in range(len(OPTIONS)))
    needless_page = max(cost[page][o] for o in range(len(OPTIONS)) if o not in (page, incident))
    missed_incident = min(cost[queue][page], cost[queue][incident])
    assert missed_incident >= 1.5 * needless_page
    assert cost[queue][incident] == rules.MAX_COST == max(max(row) for row in cost)
    for a in range(len(OPTIONS)):
        for o in range(len(OPTIONS)):
            assert 0.0 <= rules.reward_of(a, o) <= 1.0


def test_answer_parsing_is_tolerant_but_whole_words() -> None:
    assert chosen_option("Queue-Team") == "queue_team"
    assert chosen_option("**page on call**") == "page_oncall"
    assert chosen_option("page oncall. Final answer: page_oncall") == "page_oncall"
    assert chosen_option("AUTO REMEDIATE") == "auto_remediate"
    assert chosen_option("reopen_incident") is None
    assert chosen_option("queue_teams") is None
    assert chosen_option("closed duplicate") is None
    assert chosen_option(None) is None
    assert named_options("open_incident then page_oncall") == ["open_incident", "page_oncall"]


def test_config_hash_and_limits() -> None:
    spec = TriageEnv()
    assert spec.id == "triage" and spec.limits(spec.tasks(n=1)[0]).max_steps == 1
    assert spec.content_hash() == TriageEnv().content_hash()
    assert spec.content_hash() != TriageEnv(noise=0.1).content_hash()
    with pytest.raises(ConfigError, match="bad config for environment 'triage'"):
        TriageEnv(nosie=0.1)
    with pytest.raises(ConfigError):
        TriageEnv(noise=0.9)
    noisy = TriageEnv(noise=0.3).tasks(n=500)
    assert expected_optimum(noisy) < expected_optimum(spec.tasks(n=500))
    assert len(TriageEnv(size=7).tasks()) == 7
    loaded = load_env("envlab.envs.triage:TriageEnv", size=5)  # the entry point's target
    assert isinstance(loaded, TriageEnv) and len(loaded.tasks(split="train")) == 5


# --- reading an answer: Unicode disguises, honest spellings, one read per grade ---------------

SEEN_AS_TWO = {  # normalized, the hidden option is read: two options
    "zero_width_space": "queue_team pa\u200bge_oncall",
    "word_joiner": "queue_team pa\u2060ge_oncall",
    "bom": "queue_team pa\ufeffge_oncall",
    "soft_hyphen": "queue_team pa\u00adge_oncall",
    "grapheme_joiner": "queue_team pa\u034fge_oncall",
    "tag_character": "queue_team pa\U000e0041ge_oncall",
    "fullwidth": "queue_team \uff50\uff41\uff47\uff45\uff3f\uff4f\uff4e\uff43\uff41\uff4c\uff4c",
    "math_bold": "queue_team \U0001d429\U0001d41a\U0001d420\U0001d41e_oncall",
    "circled": "queue_team \u24df\u24d0\u24d6\u24d4 oncall",
    "accented": "queue_team p\u00e1ge_\u00f3ncall",
    "combining_accent": "queue_team pa\u0301ge_oncall",
    "capital_i_for_l": "queue_team page_oncaIl",
    "zero_for_o": "queue_team 0pen_incident",
    "rn_for_m": "page_oncall queue tearn",
}
DISGUISED = {  # a look-alike the gate cannot read: names no single option
    "cyrillic_a": "queue_team p\u0430ge_oncall",
    "cyrillic_word": "queue_team \u0441\u04cf\u043e\u0455\u0435_duplicate",
    "greek_capitals": "queue_team \u03a1\u0391GE_ONCALL",
    "small_capitals": "queue_team \u1d18\u1d00\u0262\u1d07_oncall",
    "negative_squared": "queue_team \U0001f17f\U0001f170\U0001f176\U0001f174_oncall",
    "regional_indicators": "queue_team \U0001f1f5\U0001f1e6\U0001f1ec\U0001f1ea_oncall",
    "bidi_override": "queue_team \u202ellacno_egap\u202c",
    "hangul_filler": "queue_team\u3164page_oncall",
    "cjk_glued": "queue_team\u7b54page_oncall",
    "private_use": "queue_team pa\ue000ge_oncall",
}


@pytest.mark.parametrize(
    "answer", [*SEEN_AS_TWO.values(), *DISGUISED.values()], ids=[*SEEN_AS_TWO, *DISGUISED]
)
async def test_an_option_in_unicode_disguise_is_no_single_option(answer: str) -> None:
    assert chosen_option(answer) is None
    spec = TriageEnv()
    trajs = await _run(spec, AnswerAgent(answer), list(spec.tasks(n=3, split="test")))
    for t in trajs:
        assert t.scored and t.reward == 0.0 and t.gated_by == "one_option"


@pytest.mark.parametrize("answer", SEEN_AS_TWO.values(), ids=SEEN_AS_TWO.keys())
def test_a_normalized_answer_shows_the_hidden_option(answer: str) -> None:
    assert len(named_options(answer)) == 2


HONEST = {
    "fullwidth": ("\uff51\uff55\uff45\uff55\uff45\uff3f\uff54\uff45\uff41\uff4d", "queue_team"),
    "math_bold": ("\U0001d42a\U0001d42e\U0001d41e\U0001d42e\U0001d41e team", "queue_team"),
    "accented": ("qu\u00e9ue_team", "queue_team"),
    "soft_hyphen": ("que\u00adue_team", "queue_team"),
    "nbsp": ("PAGE\u00a0ONCALL", "page_oncall"),
    "curly_quotes": ("\u201cclose-duplicate\u201d", "close_duplicate"),
    "emoji": ("\u2705 auto_remediate \U0001f680\U0001f680", "auto_remediate"),
    "cjk_prose": ("\u7b54\u6848\uff1aopen_incident\u3002", "open_incident"),
    "arabic_prose": ("\u0627\u0644\u062c\u0648\u0627\u0628: queue_team", "queue_team"),
    "greek_letter": ("\u0394 latency up, so page_oncall", "page_oncall"),
    "dash": ("Decision \u2014 queue_team", "queue_team"),
}


@pytest.mark.parametrize("answer,option", HONEST.values(), ids=HONEST.keys())
def test_an_honest_answer_with_unicode_is_read_as_its_option(answer: str, option: str) -> None:
    assert chosen_option(answer) == option


def _word_reading(text: str) -> list[str]:
    """The ASCII reading triage has always had: whole [a-z0-9]+ words, matched in order."""
    forms = {o: [tuple(o.split("_"))] for o in OPTIONS}
    forms["page_oncall"].append(("page", "on", "call"))
    forms["auto_remediate"].append(("autoremediate",))
    words, found = re.findall(r"[a-z0-9]+", text.lower()), []
    for i in range(len(words)):
        for o, fs in forms.items():
            if o not in found and any(tuple(words[i : i + len(f)]) == f for f in fs):
                found.append(o)
    return found


def test_an_ascii_answer_is_read_as_whole_words_as_before() -> None:
    vocab = ["page", "on", "call", "oncall", "open", "incident", "queue", "team", "auto"]
    vocab += ["remediate", "autoremediate", "close", "duplicate", "reopen", "teams", "x"]
    vocab += ["PAGE", "Queue", "Close", "oncaller", "closed", "or", "not", "2", "the"]
    seps = [" ", "_", "-", "", ", ", "\n", "**", "/", "`", ".", " - ", "\t"]
    r = random.Random(13)
    for _ in range(3000):
        parts = [r.choice(vocab) + r.choice(seps) for _ in range(r.randint(1, 8))]
        text = "".join(parts)
        assert named_options(text) == _word_reading(text), text


def test_the_reading_is_bounded() -> None:
    many = "".join(chr(0x4E00 + i) for i in range(5000)) + " queue_team"  # > _MAX_DISTINCT
    assert chosen_option(many) is None and named_options(many) == ["queue_team"]
    assert chosen_option("\ufdfa" * 1000 + " queue_team") is None  # U+FDFA: 18 characters
    assert chosen_option("\u4e00" * 10_000 + " queue_team") == "queue_team"


async def test_an_answer_is_read_once_per_grade_and_a_2mb_answer_is_graded() -> None:
    from envlab.envs import triage

    spec = TriageEnv()
    tasks = list(spec.tasks(n=4, split="test"))
    filler = "a " * 1_000_000  # 2 MB
    answers = [filler + "queue_team", "queue_team " + filler + "page_oncall"]
    answers += [filler + "queue_team p\u0430ge_oncall", filler + "\u00a0close duplicate"]
    before = triage._read.cache_info()
    trajs = []
    for answer, task in zip(answers, tasks, strict=True):
        trajs += await _run(spec, AnswerAgent(answer), [task])
    after = triage._read.cache_info()
    assert after.misses - before.misses == 4  # one reading per grade
    assert after.hits - before.hits == 4  # the other component reuses it
    assert trajs[0].reward == pytest.approx(realized_reward(tasks[0], "queue_team"))
    assert trajs[1].gated_by == "one_option" and trajs[2].gated_by == "one_option"
    assert trajs[3].reward == pytest.approx(realized_reward(tasks[3], "close_duplicate"))
