"""Where a found answer is: inside the material the instruction names (a warning) or outside it
(a leak candidate, confirmed by copying it to where the answer goes)."""

from __future__ import annotations

import base64
from pathlib import Path

from envlab.vet.leak import Needle, named_material, scan_workspace, split_hits

INSTRUCTION = (
    "The archive `/app/keys.tar.gz` holds the key. The logs are in `/app/logs`. "
    "Decode `/app/message.b64`."
)


def _workspace(root: Path) -> None:
    (root / "logs").mkdir(parents=True)
    (root / "logs" / "api.log").write_text("answer: K-123\n")
    (root / "message.b64").write_text(base64.b64encode(b"the key is K-123").decode() + "\n")
    (root / ".cache").mkdir()
    (root / ".cache" / "expected").write_text("K-123\n")
    (root / "keys.tar.gz").write_bytes(b"not really an archive")


def test_material_is_what_the_instruction_names(tmp_path: Path) -> None:
    _workspace(tmp_path)
    material = named_material(tmp_path, INSTRUCTION)
    assert {"/app/keys.tar.gz", "/app/logs", "/app/message.b64"} <= material
    assert not any(m.startswith("/app/.cache") for m in material)


def test_hits_inside_the_material_are_warnings_and_outside_are_candidates(tmp_path: Path) -> None:
    _workspace(tmp_path)
    hits = scan_workspace(tmp_path, [Needle("K-123", "tests/test.sh")], declared=set())
    where = {h.where for h in hits}
    assert "/app/message.b64 (base64-decoded)" in where
    assert {"/app/logs/api.log", "/app/.cache/expected"} <= where
    candidates, inside = split_hits(hits, named_material(tmp_path, INSTRUCTION))
    assert {h.where for h in candidates} == {"/app/.cache/expected"}
    assert {h.where for h in inside} == {"/app/logs/api.log", "/app/message.b64 (base64-decoded)"}
    assert candidates[0].full_needle == "K-123" and "full_needle" not in candidates[0].to_dict()
