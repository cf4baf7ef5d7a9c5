#!/bin/bash
# reward = share of tests passed, counted inside pytest by tests/conftest.py, which writes
# /logs/verifier/reward.json when the session finishes (no report file the code under test,
# run in child processes, could forge or lock in the meantime)
pytest -q /tests/test_textstats.py
