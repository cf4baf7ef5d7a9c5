"""Groups and advantages of a run: scored episodes only, sample std, dead groups."""

from __future__ import annotations

import math

from envlab.export import DEFAULT_EPS, scan_run
from envlab.runs import RunDir


def test_groups_hold_scored_episodes_only_and_count_the_rest(run: RunDir) -> None:
    scan = scan_run(run)
    assert scan.n_episodes == 12  # g0-3's infra error was retried: its later record wins
    assert dict(scan.unscored) == {"env_error": 1, "infra_error": 1}
    sizes = {gid: [m.sample_index for m in g.members] for gid, g in scan.groups.items()}
    assert sizes == {"g0": [0, 1, 2, 3], "g1": [0, 1, 2], "g2": [0], "g3": [0, 1]}
    assert sorted(scan.dead_groups) == ["g1", "g2"]


def test_advantages_match_a_hand_computation(run: RunDir) -> None:
    g0 = scan_run(run).groups["g0"]
    # rewards 1, 0, 1, 0.5: mean 2.5 / 4; squared deviations 0.140625 * 2 + 0.390625 + 0.015625
    mean, std = 0.625, math.sqrt(0.6875 / 3)  # sample std: n - 1 = 3
    assert g0.mean == mean and math.isclose(g0.std, std, rel_tol=1e-12)
    want = {1.0: 0.375 / (std + 1e-6), 0.0: -0.625 / (std + 1e-6), 0.5: -0.125 / (std + 1e-6)}
    for r, adv in want.items():
        assert math.isclose(g0.advantage(r), adv, rel_tol=1e-12)
    assert DEFAULT_EPS == 1e-6
    assert math.isclose(g0.advantage(1.0, eps=1e-4), 0.375 / (std + 1e-4), rel_tol=1e-12)
    assert math.isclose(sum(g0.advantage(m.reward) for m in g0.members), 0.0, abs_tol=1e-12)


def test_dead_groups_have_zero_advantage(run: RunDir) -> None:
    groups = scan_run(run).groups
    for gid in ("g1", "g2"):  # all equal; a single scored episode
        g = groups[gid]
        assert g.dead and all(g.advantage(m.reward) == 0.0 for m in g.members)
    assert not groups["g3"].dead
