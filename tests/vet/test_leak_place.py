"""A prompt leak is an answer an agent can pick out without solving: one at a marked place.
An answer that is what the task asks to find (a needle among a haystack, an option among the
options it lists) is not one. Found on reasoning-gym: needle_haystack, acre, color_cube_rotation
and mahjong_puzzle were quarantined for the answer being in their prompt."""

from __future__ import annotations

import random

from envlab.core import Task
from envlab.vet.python_checks import answer_leak, findable

NAMES = ["Ada", "Bo", "Cy", "Di", "Ed", "Flo", "Gus", "Hal", "Ivy", "Jo", "Kim", "Lu"]
HOBBIES = ["painting", "rowing", "chess", "knitting", "fencing", "baking", "surfing", "origami"]


def _haystack(i: int) -> tuple[str, str]:
    r = random.Random(i)
    lines = [f"{n} enjoys {r.choice(HOBBIES)}." for n in NAMES]
    who = r.randrange(len(NAMES))
    answer = lines[who].split(" enjoys ")[1].rstrip(".")
    return " ".join(lines) + f" What does {NAMES[who]} enjoy?", answer


def _findings(prompts_answers: list[tuple[str, str]]) -> str:
    tasks = [Task(id=f"t{i}", prompt=p, answer=a) for i, (p, a) in enumerate(prompts_answers)]
    return answer_leak(tasks)[0].status


def test_a_needle_in_a_haystack_is_not_a_leak() -> None:
    pairs = [_haystack(i) for i in range(12)]
    assert not findable([a for _, a in pairs], [p for p, _ in pairs])
    assert _findings(pairs) == "pass"


def test_an_answer_at_a_marked_place_is_a_leak_even_among_a_haystack() -> None:
    """The same haystack with the answer also written after the same words in every prompt,
    or labelled, or at the prompt's end: caught."""
    for mark in ("{p} (ref: {a})", "Expected: {a}. {p}", "{p} {a}"):
        pairs = [(mark.format(p=p, a=a), a) for p, a in (_haystack(i) for i in range(12))]
        assert findable([a for _, a in pairs], [p for p, _ in pairs]), mark
    pairs = [(f"{p} (ref: {a})", a) for p, a in (_haystack(i) for i in range(12))]
    assert _findings([(p, f"{a}-{i}") for i, (p, a) in enumerate(pairs)]) == "pass"  # not there
    leaked = [(f"Sum {i} and 1000. (ref: {i + 1000})", str(i + 1000)) for i in range(12)]
    assert _findings(leaked) == "fail"


def test_an_option_among_the_listed_options_is_not_a_leak() -> None:
    """Every prompt lists the same options: the other tasks' answers are there as often."""
    opts = ["crimson", "emerald", "sapphire"]
    pairs = [(f"Which colour is on top after turn {i}? One of: {', '.join(opts)}.", opts[i % 3])
             for i in range(9)]  # fmt: skip
    assert _findings(pairs) == "pass"
    few = pairs[:4]  # too few to test against chance: passes, since other answers are there
    assert _findings(few) == "pass"
