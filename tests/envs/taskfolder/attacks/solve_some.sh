# an honest agent that knows three of the example tasks (their oracles' approach), keyed on
# what the workspace holds, and does nothing on the others
if [ -f /app/logs/api.log ]; then  # log-errors
  cat /app/logs/*.log | grep -c ERROR > /app/answer.txt; exit 0
fi
if [ -f /app/sales.csv ]; then  # csv-aggregate
  python3 - <<'PY'
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
PY
  exit 0
fi
if [ -z "$(ls -A /app)" ]; then  # hello-file
  printf 'Hello, world!\n' > /app/hello.txt; exit 0
fi
