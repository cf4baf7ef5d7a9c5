import csv
import sys
from collections import defaultdict
from decimal import Decimal


def expected() -> list[list[str]]:
    totals: dict[str, Decimal] = defaultdict(Decimal)
    with open("/tests/sales.csv") as f:
        for row in csv.DictReader(f):
            totals[row["region"]] += int(row["units"]) * Decimal(row["unit_price"])
    ordered = sorted(totals.items(), key=lambda kv: -kv[1])
    return [["region", "revenue"]] + [[k, f"{v:.2f}"] for k, v in ordered]


try:
    with open("/app/summary.csv", newline="") as f:
        got = [row for row in csv.reader(f) if row]
except OSError:
    got = []
sys.exit(0 if got == expected() else 1)
