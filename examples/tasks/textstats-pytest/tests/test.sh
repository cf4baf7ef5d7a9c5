#!/bin/bash
# reward = share of tests passed, counted inside pytest by tests/conftest.py, which writes
# /logs/verifier/reward.json when the session finishes (no report file the code under test,
# run in child processes, could forge or lock in the meantime)
# the test runner: the image's, else installed as Terminal-Bench's scripts do (envlab grades
# offline: the wheel is fetched when the image is built)
command -v pytest >/dev/null || python3 -m pip install -q pytest==8.3.4
pytest -q /tests/test_textstats.py
