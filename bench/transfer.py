"""Export and import at scale: how long they take, and whether memory stays flat.

    python bench/transfer.py --url postgresql://postgres@127.0.0.1:5432/postgres \\
        [--runs 100000] [--json out.json]

A source database gets bench/history.py's history (``--runs`` finished runs, 10
steps and 2 model calls each, written with SQL), a target database none; one real
``keelwave serve`` (one process) on each. Then:

1. ``keelwave export -o FILE`` from the source, timed; against ``COPY … TO STDOUT``
   of the same three tables in the same run (the fastest a database can hand its
   rows out);
2. ``keelwave import FILE`` into the target, timed; against ``COPY … FROM STDIN`` of
   the same rows into unindexed scratch tables (the fastest they can go in);
3. the peak resident memory of each server and of each CLI process, before and
   after (a server that held an export in memory would grow with ``--runs``);
4. ``/loops`` of a sample of runs, compared between the two servers.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from history import scratch, serve  # noqa: E402


def peak_kib(pid: int) -> int:
    """The peak resident memory of a process and its children (VmHWM), in KiB."""
    total = 0
    pids = [pid]
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists():
        pids += [int(child) for child in children.read_text().split()]
    for each in pids:
        for line in Path(f"/proc/{each}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                total = max(total, int(line.split()[1]))
    return total


def mib(before_kib: int, server) -> list[int]:
    """A server's peak memory before and after, in MiB."""
    return [round(before_kib / 1024), round(peak_kib(server.process.pid) / 1024)]


def run_cli(args: list[str], env: dict) -> tuple[float, int, str]:
    """Seconds, peak resident KiB and output of one `keelwave` command (its VmHWM, read
    until it exits: getrusage would count the memory of this process, forked)."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "keelwave.cli", *args],
        env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    peak = 0
    while process.poll() is None:
        with contextlib.suppress(OSError, ValueError):
            peak = max(peak, peak_kib(process.pid))
        time.sleep(0.05)
    seconds = time.perf_counter() - started
    stdout, stderr = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"keelwave {' '.join(args)} failed:\n{stdout}{stderr}")
    return seconds, peak, stdout + stderr


TABLES = ("agent_runs", "agent_steps", "ai_traces")


def copy_out(url: str) -> tuple[float, bytes]:
    buffer = io.BytesIO()
    started = time.perf_counter()
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        for table in TABLES:
            with cur.copy(f"COPY {table} TO STDOUT") as copy:
                for chunk in copy:
                    buffer.write(chunk)
                buffer.write(b"\\.\n")
    return time.perf_counter() - started, buffer.getvalue()


def copy_in(url: str, data: bytes) -> float:
    parts = data.split(b"\\.\n")
    with psycopg.connect(url, autocommit=True) as conn:
        for table in TABLES:
            conn.execute(f"DROP TABLE IF EXISTS bench_{table}")
            conn.execute(f"CREATE UNLOGGED TABLE bench_{table} (LIKE {table})")
        started = time.perf_counter()
        with conn.cursor() as cur:
            for table, part in zip(TABLES, parts, strict=False):
                with cur.copy(f"COPY bench_{table} FROM STDIN") as copy:
                    copy.write(part)
        seconds = time.perf_counter() - started
        for table in TABLES:
            conn.execute(f"DROP TABLE bench_{table}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()

    print(f"source: {options.runs:,} runs, {options.runs * 10:,} steps", flush=True)
    source_url, source_key, _ = scratch(options.url, "kw_bench_export", options.runs, False)
    target_url, target_key, _ = scratch(options.url, "kw_bench_import", 1, False)
    folder = Path(tempfile.mkdtemp(prefix="kw_transfer_"))
    source = serve(source_url, None, folder / "source.log")
    target = serve(target_url, None, folder / "target.log")
    results: dict = {"runs": options.runs, "steps": options.runs * 10,
                     "interpreter": sys.executable, "python": sys.version.split()[0]}  # fmt: skip
    try:
        baseline_out, rows = copy_out(source_url)
        baseline_in = copy_in(source_url, rows)
        del rows
        export_file = folder / "export.jsonl"
        server_before = peak_kib(source.process.pid)
        seconds, cli_kib, said = run_cli(
            ["export", "-o", str(export_file)],
            {"KEELWAVE_ENDPOINT": source.url, "KEELWAVE_API_KEY": source_key},
        )
        results["export"] = {
            "seconds": round(seconds, 1), "copy_out_seconds": round(baseline_out, 1),
            "ratio_to_copy": round(baseline_out / seconds, 3),
            "file_mib": round(export_file.stat().st_size / 2**20),
            "server_peak_mib": mib(server_before, source),
            "cli_peak_mib": round(cli_kib / 1024), "said": said.strip(),
        }  # fmt: skip
        print("export", json.dumps(results["export"]), flush=True)

        server_before = peak_kib(target.process.pid)
        seconds, cli_kib, said = run_cli(
            ["import", str(export_file)],
            {"KEELWAVE_ENDPOINT": target.url, "KEELWAVE_API_KEY": target_key},
        )
        results["import"] = {
            "seconds": round(seconds, 1), "copy_in_seconds": round(baseline_in, 1),
            "ratio_to_copy": round(baseline_in / seconds, 3),
            "steps_per_second": round(options.runs * 10 / seconds),
            "server_peak_mib": mib(server_before, target),
            "cli_peak_mib": round(cli_kib / 1024), "said": said.strip(),
        }  # fmt: skip
        print("import", json.dumps(results["import"]), flush=True)

        with psycopg.connect(source_url) as conn:
            project = conn.execute("SELECT id FROM projects").fetchone()[0]  # type: ignore[index]
            sample = [row[0] for row in conn.execute("SELECT id FROM agent_runs")]
        same = 0
        for run_id in random.Random(7).sample(sample, min(50, len(sample))):
            answers = []
            pairs = ((source, source_key, source_url), (target, target_key, target_url))
            for server, key, url in pairs:
                with psycopg.connect(url) as conn:
                    pid = conn.execute("SELECT id FROM projects").fetchone()[0]  # type: ignore[index]
                answers.append(
                    httpx.get(
                        f"{server.url}/v1/projects/{pid}/agent/runs/{run_id}/loops",
                        headers={"Authorization": f"Bearer {key}"},
                    ).json()
                )
            same += answers[0] == answers[1]
        results["loops_identical"] = f"{same} of {min(50, len(sample))} sampled runs"
        print("loops", results["loops_identical"], "project", project, flush=True)
    finally:
        for process in (source, target):
            process.stop()
            process.kill()
    if options.json:
        options.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
