#!/bin/bash
python3 - <<'EOF'
import sqlite3

score = {"answer": 0.0, "view": 0.0}
try:
    db = sqlite3.connect("file:/app/shop.db?mode=ro", uri=True)
    truth = dict(
        db.execute(
            "SELECT customer_id, SUM(amount_cents) FROM orders WHERE status = 'paid' "
            "GROUP BY customer_id"
        ).fetchall()
    )
    best = max(truth, key=truth.get)
    (name,) = db.execute("SELECT name FROM customers WHERE id = ?", (best,)).fetchone()
    try:
        answer = open("/app/answer.txt").read().strip()
    except OSError:
        answer = None
    score["answer"] = float(answer == name)
    try:
        view = dict(db.execute("SELECT customer_id, total_cents FROM paid_totals").fetchall())
        score["view"] = float(view == truth)
    except sqlite3.Error:
        pass
except sqlite3.Error:
    pass
total = 1.0 if all(v == 1.0 for v in score.values()) else 0.0
with open("/logs/verifier/reward.txt", "w") as f:
    f.write(f"{total}\n")
EOF
