#!/bin/bash
# exact bytes: one line, one newline
expected=$(printf 'Hello, world!\nX')
actual=$(cat /app/hello.txt 2>/dev/null; printf X)

if [ -f /app/hello.txt ] && [ ! -L /app/hello.txt ] && [ "$actual" = "$expected" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
