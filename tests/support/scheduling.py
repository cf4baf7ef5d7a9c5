"""How the suite's tests are dealt to pytest-xdist's workers (``-n auto --dist loadgroup``).

A group of tests runs in one worker, so a fixture the group shares is set up once per run: each
test file is a group (its module-scoped fixtures: one vet of the gallery, one set of image
bases), and the tests that hold the torch engine in process, across two files, are one group
(a ~25 s model load each time). The longest groups are dealt first, so that none of them starts
last and runs alone while the other worker sits idle.

The group is read from the test's node id, by the controller (which collects nothing): pytest
9's node ids cannot take the ``@group`` suffix of xdist's own ``xdist_group`` marker.
"""

from __future__ import annotations

from typing import Any

TORCH_GROUP = "torch-engine"
TORCH_FILES = ("tests/models/test_engines.py", "tests/models/test_embedded_model.py")
"""Their tests take the session's ``engine`` fixture parametrized over llama.cpp and torch."""

ALONE = (
    "tests/envs/taskfolder/test_examples_image.py::test_vet_rates_every_example_ok_in_both_runtimes[off]",
)
"""Long tests of a long file that share none of its expensive fixtures (``[off]`` vets the
examples on the host: no image bases), each a group of its own."""

LONG_GROUPS = (
    "tests/envs/taskfolder/test_examples_image.py",
    "tests/vet/test_gallery.py",
    TORCH_GROUP,
    *ALONE,
    "tests/envs/tau/test_tau_model.py",
    "tests/envs/taskfolder/test_grading_attacks.py",
    "tests/agents/test_transcript.py",
    "tests/cli/test_robustness.py",
    "tests/adapters/test_textarena.py",
    "tests/cli/test_eval_cli.py",
    "tests/cli/test_train_cmd.py",
    "tests/envs/taskfolder/test_separate_redteam.py",
)
"""The suite's longest groups, longest first (``--durations=0`` of a serial run: the examples
in image mode 623 s of 783 s with their bases built, the gallery's vet 253 s, ...)."""


def group_of(nodeid: str) -> str:
    """The group of the test ``nodeid``: ``torch-engine`` for a test that loads the torch
    engine in process, else its file."""
    path, _, name = nodeid.partition("::")
    params = name.partition("[")[2].rstrip("]")
    on_torch = "torch" in params.split("-") or name.startswith("test_both_engines")
    if nodeid in ALONE:
        return nodeid
    return TORCH_GROUP if path in TORCH_FILES and on_torch else path


def rank(nodeid: str) -> int:
    """The place of the test's group in the dealing order: the long ones first."""
    group = group_of(nodeid)
    return LONG_GROUPS.index(group) if group in LONG_GROUPS else len(LONG_GROUPS)


def make_scheduler(config: Any, log: Any) -> Any:
    """xdist's ``loadgroup`` scheduler with the groups of ``group_of``, dealt in collection
    order (conftest sorts the long ones first; xdist's own order, most tests first, dealt the
    examples' 5 long tests last: measured, they then ran alone at the end of the run)."""
    from xdist.scheduler import LoadGroupScheduling

    config.option.loadscopereorder = False

    class GroupScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return GroupScheduling(config, log)
