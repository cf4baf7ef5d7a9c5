"""The Dockerfile subset: what is honoured, what is recorded, what is refused (naming the line)."""

from __future__ import annotations

import pytest

from envlab.sandbox.tasks.dockerfile import (
    Copy,
    DockerfileError,
    Run,
    logical_lines,
    substitute,
)
from envlab.sandbox.tasks.host_build import parse_dockerfile


def test_continuations_and_comments() -> None:
    text = "FROM x\n# a comment\nRUN a \\\n    && b \\\n# inside\n    && c\n\nWORKDIR /app\n"
    assert logical_lines(text) == [(1, "FROM x"), (3, "RUN a && b && c"), (8, "WORKDIR /app")]


def test_a_typical_harbor_dockerfile() -> None:
    plan = parse_dockerfile(
        """
        FROM python:3.11-slim AS base
        LABEL maintainer="x"
        ARG VERSION=2
        ENV APP_ENV=prod DATA_DIR=/app/data
        ENV LEGACY the value
        WORKDIR /app
        COPY requirements.txt ./
        COPY --chown=1000:1000 src/ /app/src/
        ADD data.tar.gz ${DATA_DIR}/
        RUN echo "$APP_ENV" > env.txt
        RUN ["python3", "-c", "print(1)"]
        WORKDIR src
        EXPOSE 8000
        CMD ["python3", "main.py"]
        """.replace("        ", "")
    )
    assert plan.base_image == "python:3.11-slim"
    assert plan.workdir == "/app/src"
    assert plan.env == {"APP_ENV": "prod", "DATA_DIR": "/app/data", "LEGACY": "the value"}
    copies = [s for s in plan.steps if isinstance(s, Copy)]
    assert [(c.sources, c.dest, c.extract) for c in copies] == [
        (("requirements.txt",), "/app/", False),
        (("src/",), "/app/src/", False),
        (("data.tar.gz",), "/app/data/", True),
    ]
    runs = [s for s in plan.steps if isinstance(s, Run) and not s.text.startswith("WORKDIR")]
    assert runs[0].argv == ("/bin/sh", "-c", 'echo "$APP_ENV" > env.txt')
    assert dict(runs[0].env)["VERSION"] == "2"
    assert runs[1].argv == ("python3", "-c", "print(1)")
    assert any("FROM python:3.11-slim is not met" in n for n in plan.notes)
    assert any("EXPOSE ignored" in n for n in plan.notes)


@pytest.mark.parametrize(
    ("text", "line", "why"),
    [
        ("FROM a\nWORKDIR /src\n", 2, "use WORKDIR /app"),
        ("FROM a\nFROM b\n", 2, "multi-stage"),
        ("COPY --from=build /x /app/\n", 1, "--from"),
        ("ADD https://example.org/x.tgz /app/\n", 1, "URLs cannot be fetched"),
        ("COPY ../secret /app/\n", 1, "outside the build context"),
        ("COPY a /opt/a\n", 1, "outside the workspace"),
        ("WORKDIR /app\nUSER bob\n", 2, "switching users"),
        ("RUN --mount=type=cache,target=/x true\n", 1, "RUN flags"),
        ("RUN true\nRUN --mount=type=secret,id=x true\n", 2, "--mount=type=secret"),
        ("FROM a AS build\nRUN true\nFROM b\nCOPY --from=build /x /app/\n", 3, "multi-stage"),
        ("RUN true\nFROM a\n", 2, "FROM must come before"),
        ("ONBUILD RUN true\n", 1, "ONBUILD is not supported"),
        ("SHELL bash\n", 1, "JSON list"),
    ],
)
def test_what_cannot_be_honoured_names_the_line(text: str, line: int, why: str) -> None:
    with pytest.raises(DockerfileError) as e:
        parse_dockerfile(text, source="t/environment/Dockerfile")
    assert f"t/environment/Dockerfile:{line}:" in str(e.value) and why in str(e.value)


def test_heredocs_work_in_the_host_mode_too() -> None:
    """The one reader's heredocs: ``RUN <<EOF`` runs the body, ``COPY <<EOF`` writes a file."""
    plan = parse_dockerfile("FROM a\nRUN <<EOF\necho hi\nEOF\nCOPY <<EOF notes.txt\nnote\nEOF\n")
    run, copy = plan.steps
    assert isinstance(run, Run) and run.argv == ("/bin/sh", "-c", "echo hi\n")
    assert isinstance(copy, Copy) and copy.inline == (("EOF", "note\n"),)
    assert copy.dest == "/app/notes.txt" and copy.sources == ()


def test_user_root_shell_and_relative_workdir() -> None:
    plan = parse_dockerfile('USER root\nSHELL ["/bin/bash", "-c"]\nWORKDIR a/b\nRUN echo hi\n')
    run = [s for s in plan.steps if isinstance(s, Run)][-1]
    assert plan.workdir == "/app/a/b" and run.argv[:2] == ("/bin/bash", "-c")
    assert run.workdir == "/app/a/b"


def test_substitution() -> None:
    v = {"A": "1", "E": ""}
    assert substitute("$A/${A}/${B:-d}/${E:-e}/${A:+set}/${B:+no}/\\$A", v) == "1/1/d/e/set//$A"
