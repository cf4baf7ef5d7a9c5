#!/bin/bash
# 2 in api.log + 28 multiples of 7 in 1..200 in worker.log

if [ "$(tr -d "[:space:]" < /app/answer.txt 2>/dev/null)" = "30" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
