"""The layers' import rules ([tool.importlinter] in pyproject.toml), checked by import-linter.

The SDK never reaches the server, the CLI or the terminal app (nor what they
need); the store never imports aiohttp or the HTTP layer; ingest and query
never import each other, directly or through another module.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_import_contracts_are_kept() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True))",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout
    assert result.stdout.count("KEPT") == 3
