#!/bin/bash
python3 -c '
import json
users = json.load(open("/app/users.json"))
emails = sorted({u["email"].lower() for u in users if u["active"] is True})
json.dump(emails, open("/app/active_emails.json", "w"), indent=2)
'
