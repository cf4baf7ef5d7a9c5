#!/bin/bash
python3 - <<'EOF'
import sqlite3
db = sqlite3.connect("/app/shop.db")
db.execute(
    "CREATE VIEW paid_totals AS SELECT customer_id, SUM(amount_cents) AS total_cents "
    "FROM orders WHERE status = 'paid' GROUP BY customer_id"
)
db.commit()
(name,) = db.execute(
    "SELECT c.name FROM paid_totals p JOIN customers c ON c.id = p.customer_id "
    "ORDER BY p.total_cents DESC LIMIT 1"
).fetchone()
open("/app/answer.txt", "w").write(name + "\n")
EOF
