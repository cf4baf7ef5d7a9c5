"""What the CLI prints around a command: a Python warning is one line, not its source."""

from __future__ import annotations

import warnings

import pytest
import typer

from envlab.cli.console import run_app


def test_a_warning_is_one_line_without_its_source(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    app = typer.Typer()

    @app.command()
    def go() -> None:
        msg = "FROM ubuntu:24.04 is not met: commands run on the host"
        warnings.warn(msg, RuntimeWarning, stacklevel=2)

    saved = warnings.showwarning
    try:
        with warnings.catch_warnings(), pytest.raises(SystemExit):
            warnings.simplefilter("always")
            monkeypatch.setattr("sys.argv", ["envlab"])
            run_app(app)
    finally:
        warnings.showwarning = saved
    err = capsys.readouterr().err
    assert "warning: FROM ubuntu:24.04 is not met" in err
    assert "warnings.warn(" not in err and "RuntimeWarning" not in err
