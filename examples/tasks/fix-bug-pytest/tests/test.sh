#!/bin/bash
# the test runner: the image's, else installed as Terminal-Bench's scripts do (envlab grades
# offline: the wheel is fetched when the image is built)
python3 -m pytest --version >/dev/null 2>&1 || python3 -m pip install -q pytest==8.3.4
python3 -m pytest -q /tests/test_merge.py
ok=$?
# the code under test ran in here (in child processes): whatever it left in /logs/verifier
# (a reward of its own, made read-only) goes before the tests' reward is written
chmod -R u+w /logs/verifier 2>/dev/null
rm -rf /logs/verifier/* 2>/dev/null

if [ $ok -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
