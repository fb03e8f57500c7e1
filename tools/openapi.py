"""Write the served OpenAPI document of ``gps-dagster serve`` to docs/openapi.json.

.venv/bin/python tools/openapi.py          # rewrite docs/openapi.json
.venv/bin/python tools/openapi.py --check  # exit 1 when it differs (tests/api do the same)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "docs" / "openapi.json"


def document() -> str:
    sys.path.insert(0, str(ROOT / "tests" / "api"))
    import tempfile

    from api_support import make_api

    with tempfile.TemporaryDirectory() as tmp:
        api = make_api(f"sqlite:///{tmp}/openapi.sqlite")
        doc = api.client.get("/openapi.json").json()
        api.services.store.engine.dispose()
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def main() -> int:
    text = document()
    if "--check" in sys.argv:
        same = TARGET.exists() and TARGET.read_text() == text
        print("docs/openapi.json is " + ("up to date" if same else "stale: run tools/openapi.py"))
        return 0 if same else 1
    TARGET.write_text(text)
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
