#!/bin/bash
# the pristine copy of the data is in /tests: the agent could have edited /app/sales.csv
python3 /tests/check.py

if [ $? -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
