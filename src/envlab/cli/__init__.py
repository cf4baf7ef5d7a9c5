"""The ``envlab`` command line (typer)."""
