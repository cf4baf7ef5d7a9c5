"""Terminal-Bench 1 task folders as Harbor task folders (``envlab task import terminal-bench``).

``mapping`` is Harbor's mapping of a task, ``compose`` its ``docker-compose.yaml``, ``solution``
a ``solution.yaml`` converted to ``solve.sh``, ``verifier_mode`` whether the tests need the
agent's system state (``[verifier] environment_mode = "shared"``).
"""

from envlab.importers.terminal_bench.mapping import (
    ImportReport,
    TaskImport,
    import_terminal_bench,
)

__all__ = ["ImportReport", "TaskImport", "import_terminal_bench"]
