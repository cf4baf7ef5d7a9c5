#!/bin/bash

if [ "$(tr -d "[:space:]" < /app/answer.txt 2>/dev/null)" = "part5/sub1/file077.txt" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
