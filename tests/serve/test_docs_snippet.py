"""docs/serve.md's Python snippet, run as written against a real ``envlab serve calc``: what its
comments say it prints is what it gets."""

from __future__ import annotations

import re
from pathlib import Path

from envlab.envs import load_env
from tests.serve.conftest import serving

DOC = Path(__file__).resolve().parents[2] / "docs" / "serve.md"


def test_the_snippet_scores_what_its_comment_says() -> None:
    code = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert code is not None, "docs/serve.md has no python block"
    with serving(load_env("calc")) as srv:
        scope: dict[str, object] = {}
        exec(code.group(1).replace("http://127.0.0.1:8000", srv.url), scope)
    r, first = scope["r"], scope["first"]
    components = {"correct": 1.0, "computed_with_tools": 1.0}
    assert r.reward == 1.0 and r.metadata["reward"]["components"] == components  # type: ignore[attr-defined]
    assert f"1.0, {components}" in code.group(1)  # the comment says what it gets
    assert first.observation["text"].startswith("Compute (5 * 7) / 7")  # type: ignore[attr-defined]
