"""Write (or check) docs/openapi.json, the API document generated from the code.

    python -m keelwave.server.apidoc            # rewrite docs/openapi.json
    python -m keelwave.server.apidoc --check    # exit 1 if it is out of date

The committed copy lets readers and client generators see the API without a
running server, and lets a review show how a change moved the API; the test
suite fails when the copy and the code disagree.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from keelwave.server.app import api_document

DEFAULT_PATH = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


def render() -> str:
    return json.dumps(api_document(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", type=Path, default=DEFAULT_PATH)
    parser.add_argument("--check", action="store_true", help="only compare, do not write")
    args = parser.parse_args(argv)
    fresh = render()
    if args.check:
        current = args.path.read_text() if args.path.exists() else ""
        if current != fresh:
            print(
                f"{args.path} is out of date: run python -m keelwave.server.apidoc", file=sys.stderr
            )
            return 1
        return 0
    args.path.write_text(fresh)
    print(f"wrote {args.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
