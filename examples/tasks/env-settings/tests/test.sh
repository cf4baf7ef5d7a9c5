#!/bin/bash
python3 - <<'EOF'
import configparser

c = configparser.ConfigParser()
ok = False
try:
    ok = bool(c.read("/app/project/settings.ini")) and (
        c.get("app", "mode"), c.get("app", "port")
    ) == ("production", "8125")
except configparser.Error:
    pass
open("/logs/verifier/reward.txt", "w").write("1\n" if ok else "0\n")
EOF
