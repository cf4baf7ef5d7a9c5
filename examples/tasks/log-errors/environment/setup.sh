#!/bin/bash
# generated at build time: a larger log, deterministic
set -eu
for i in $(seq 1 200); do
  if [ $((i % 7)) -eq 0 ]; then
    echo "2024-05-02T00:00:$((i % 60)) ERROR job $i failed"
  elif [ $((i % 11)) -eq 0 ]; then
    echo "2024-05-02T00:00:$((i % 60)) INFO  job $i: no error"
  else
    echo "2024-05-02T00:00:$((i % 60)) INFO  job $i ok"
  fi
done > logs/worker.log
