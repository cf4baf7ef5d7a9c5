#!/bin/bash
# The truth comes from the tests' own copy of the data (schema.sql and seed.py, the same as the
# build's), never from /app/shop.db: the agent can edit that, and a grader that recomputes the
# answer from it accepts the answer to whatever question the agent made of it.
python3 - <<'PY'
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile

PAID = (
    "SELECT customer_id, SUM(amount_cents) FROM orders WHERE status = 'paid' "
    "GROUP BY customer_id"
)
work = tempfile.mkdtemp()
for name in ("schema.sql", "seed.py"):
    shutil.copy(f"/tests/{name}", work)
subprocess.run([sys.executable, "seed.py"], cwd=work, check=True, capture_output=True)
pristine = sqlite3.connect(os.path.join(work, "shop.db"))
truth = dict(pristine.execute(PAID).fetchall())
best = max(truth, key=truth.get)
(name,) = pristine.execute("SELECT name FROM customers WHERE id = ?", (best,)).fetchone()

score = {"answer": 0.0, "view": 0.0}
try:
    answer = open("/app/answer.txt").read().strip()
except (OSError, UnicodeDecodeError):
    answer = None
score["answer"] = float(answer == name)
try:
    db = sqlite3.connect("file:/app/shop.db?mode=ro", uri=True)
    view = dict(db.execute("SELECT customer_id, total_cents FROM paid_totals").fetchall())
    score["view"] = float(view == truth)
except (sqlite3.Error, ValueError, TypeError):
    pass
total = 1.0 if all(v == 1.0 for v in score.values()) else 0.0
with open("/logs/verifier/reward.txt", "w") as f:
    f.write(f"{total}\n")
PY
