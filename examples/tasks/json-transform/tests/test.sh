#!/bin/bash
# named components in reward.json: the total is "reward"
python3 - <<'EOF'
import json

expected = sorted(
    {u["email"].lower() for u in json.load(open("/tests/users.json")) if u["active"] is True}
)
try:
    got = json.load(open("/app/active_emails.json"))
    valid = 1.0
except (OSError, ValueError):
    got, valid = None, 0.0
correct = 1.0 if got == expected else 0.0
with open("/logs/verifier/reward.json", "w") as f:
    json.dump({"reward": correct, "valid_json": valid, "correct": correct}, f)
EOF
