"""Print the JSON schema of ``vet.json``: ``python -m envlab.vet.schema > docs/vet-schema.json``."""

from __future__ import annotations

import json

from envlab.vet.model import EnvVet

if __name__ == "__main__":
    print(json.dumps(EnvVet.model_json_schema(), indent=2))
