"""``python -m envlab``: the ``envlab`` command."""

from envlab.cli.main import main

main()
