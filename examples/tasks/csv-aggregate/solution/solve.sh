#!/bin/bash
python3 - <<'EOF'
import csv
from collections import defaultdict
totals = defaultdict(float)
with open("/app/sales.csv") as f:
    for row in csv.DictReader(f):
        totals[row["region"]] += int(row["units"]) * float(row["unit_price"])
with open("/app/summary.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["region", "revenue"])
    for region, revenue in sorted(totals.items(), key=lambda kv: -kv[1]):
        w.writerow([region, f"{revenue:.2f}"])
EOF
