"""A failure said in one line keeps its useful part: the last line of the output it quotes."""

from __future__ import annotations

from envlab.core.text import headline


def test_the_output_tail_gives_its_last_line() -> None:
    msg = (
        "the verifier exited without writing a reward (test.sh exit code 127). Output tail:\n"
        "+ cd /tests\n+ pytest -q\ntests/test.sh: line 3: pytest: command not found\n\n"
    )
    line = headline(msg)
    assert line.startswith("the verifier exited without writing a reward")
    assert line.endswith("pytest: command not found") and "\n" not in line
    assert "Output tail" not in line


def test_short_messages_stay_and_long_ones_are_cut() -> None:
    assert headline("reward file missing") == "reward file missing"
    assert headline("x" * 500, limit=100) == "x" * 97 + "..."
    assert headline("Traceback\n  File a\nValueError: bad") == "Traceback … ValueError: bad"
