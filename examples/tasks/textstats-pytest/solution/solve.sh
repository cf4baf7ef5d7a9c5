#!/bin/bash
cat > /app/textstats.py <<'EOF'
import re
from collections import Counter

_WORD = re.compile(r"[A-Za-z0-9']+")


def word_count(text: str) -> int:
    return len(_WORD.findall(text))


def top_words(text: str, n: int) -> list[tuple[str, int]]:
    counts = Counter(w.lower() for w in _WORD.findall(text))
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]


def longest_line(path: str) -> str:
    best = ""
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if len(line) > len(best):
                best = line
    return best
EOF
