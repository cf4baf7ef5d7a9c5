from __future__ import annotations

import pytest

from envlab.envs.answers import extract_number, format_number, numbers_equal


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("42", 42),
        ("The answer is 42.", 42),
        ("3 + 4 = 7, then 7 * 2 = 14. The answer is 14", 14),
        ("Answer: $1,234.50", 1234.5),
        ("#### -17", -17),
        ("so we get \\boxed{3/4} overall", 0.75),
        ("It costs 12 dollars; final answer: 36 apples", 36),
        ("I think 5 or maybe 6", 6),
        ("−8 is the result", -8),
        ("result = .5", 0.5),
    ],
)
def test_extract_number(text: str, want: float) -> None:
    assert extract_number(text) == pytest.approx(want)


@pytest.mark.parametrize("text", ["", None, "no number here", "\\boxed{}"])
def test_no_number(text: str | None) -> None:
    assert extract_number(text) is None


def test_equality_and_format() -> None:
    assert numbers_equal(0.1 + 0.2, 0.3)
    assert not numbers_equal(None, 1.0)
    assert not numbers_equal(2.0, 3.0)
    assert format_number(19.0) == "19"
    assert format_number(2.5) == "2.5"


CALC_PROMPT = (
    "Compute 10 / 2 using the calculator tools (one tool call per operation). "
    "When you have the result, reply with just the final number."
)


@pytest.mark.parametrize(
    "text",
    [
        CALC_PROMPT,  # the whole prompt echoed
        "10 / 2",  # the expression alone: the fraction is the prompt's, not a result
        "10/2",
        "10 ÷ 2",
        "\\boxed{10 / 2}",
        "Sure! Compute 10 / 2 using the calculator tools",
        "The answer is 10 / 2",
    ],
)
def test_an_echo_of_the_prompt_is_not_an_answer(text: str) -> None:
    assert extract_number(text) is not None  # what the parser alone would read
    assert extract_number(text, not_from=[CALC_PROMPT]) is None


@pytest.mark.parametrize(
    ("text", "prompt", "want"),
    [
        ("5", CALC_PROMPT, 5),
        ("The answer is 5.", CALC_PROMPT, 5),
        ("\\boxed{5}", CALC_PROMPT, 5),
        ("10 / 2 = 5", CALC_PROMPT, 5),
        ("Compute 10 / 2 using the calculator tools: 5", CALC_PROMPT, 5),
        ("I divided 10 by 2 and got 5", CALC_PROMPT, 5),
        # the answer is a number of the prompt, stated by the agent
        ("5", "Compute (5 + 3) - 3 using the calculator tools.", 5),
        ("(5 + 3) - 3 = 5", "Compute (5 + 3) - 3 using the calculator tools.", 5),
        ("5 + 3 = 8, 8 - 3 = 5", "Compute (5 + 3) - 3 using the calculator tools.", 5),
        ("The result is 2", "Compute ((14 / 7) / 2) * 2 using the tools.", 2),
        # a unary minus is the agent's own number, not the prompt's "- 3"
        ("-3", "Compute (9 - 3) - 9 using the calculator tools.", -3),
        ("The answer is −3", "Compute (9 - 3) - 9 using the calculator tools.", -3),
        (
            "Ava has 12 apples and finds 3 more, so Ava has 15 apples.",
            "Ava has 12 apples and finds 3 more. How many apples does Ava have?",
            15,
        ),
        ("15 apples are left.", "Ivan had 30 apples and gave away 15. How many are left?", 15),
    ],
)
def test_honest_answers_parse_beside_the_prompt(text: str, prompt: str, want: float) -> None:
    assert extract_number(text, not_from=[prompt]) == pytest.approx(want)


def test_the_last_number_of_an_echo_is_not_read_either() -> None:
    prompt = "Compute ((14 / 7) / 2) * 2 using the calculator tools."
    assert extract_number("((14 / 7) / 2) * 2", not_from=[prompt]) is None
    assert extract_number("Compute ((14 / 7) / 2) * 2", not_from=[prompt]) is None


def test_the_prompt_scan_that_skips_tokenizing_never_changes_a_mask(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``mask_echoes`` tokenizes a source only when it holds one of the text's numbers (a
    cheap scan). Differential: on 3000 random texts and prompts built of numbers (signed,
    decimal, with thousands separators, unicode minus), words and operators, the mask is the
    same as with the scan turned off."""
    import random

    from envlab.envs import answers

    rng = random.Random(7)
    vocab = ["3", "-3", "−3", "14", "1,400", "0.5", ".5", "2/3", "boxes", "Fatima", "answer"]
    vocab += ["is", "=", "+", "-", "*", "(", ")", "$", "%", "x", "(-3)", "10 / 2", "3 boxes"]

    def phrase(k: int) -> str:
        return " ".join(rng.choice(vocab) for _ in range(rng.randint(1, k)))

    pairs = [(phrase(8), [phrase(14), phrase(6)]) for _ in range(3000)]
    fast = [answers.mask_echoes(text, sources) for text, sources in pairs]
    every = frozenset(("n", v) for v in (-1400.0, -14.0, -3.0, -0.5, 0.5, 2 / 3, -2 / 3, 2.0,
                                          3.0, 10.0, 14.0, 1400.0, -10.0, -2.0))  # fmt: skip
    monkeypatch.setattr(answers, "_number_keys", lambda source: every)
    slow = [answers.mask_echoes(text, sources) for text, sources in pairs]
    assert fast == slow
    assert sum(f != t for f, (t, _) in zip(fast, pairs, strict=True)) > 300  # echoes were masked
