#!/bin/bash
# the settings file must say mode = production and port = 8125 in its [app] section; read
# with the shell's own tools (the image is debian:bookworm-slim: no python)
ini=/app/project/settings.ini
value() {  # the value of key $1 in [app]
  sed -n '/^\[app\]/,/^\[/p' "$ini" 2>/dev/null | grep -E "^[[:space:]]*$1[[:space:]]*[=:]" |
    head -n 1 | sed -E 's/^[^=:]*[=:][[:space:]]*//; s/[[:space:]]*$//'
}
if [ -f "$ini" ] && [ "$(value mode)" = production ] && [ "$(value port)" = 8125 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
