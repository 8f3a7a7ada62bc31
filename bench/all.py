"""Every benchmark in bench/, one after the other, then one table against the targets.

    python bench/all.py [--seconds 10] [--queries-db kw_bench_big]
                        [--phoenix /tmp/phx/bin/phoenix] [--skip peer cli ...]

Each script runs as it would on its own (its own table is printed as it
goes) and hands its figures over in a JSON file; the summary at the end puts
them next to the targets keelwave holds itself to on a 2-core machine:

- ingest.py, twice: on the PostgreSQL at KEELWAVE_BENCH_DATABASE_URL and on
  keelwave's embedded database (what `keelwave serve` runs by default):
  batched ingest at least 50% of raw COPY into the same table, in the same
  run; single-step requests at least 3,000/s, with p99 under 50 ms at half
  that rate; server memory flat under load;
- workloads.py: the loads users have (a new user's load generator; agent-shaped
  runs of 20 steps with their start, model calls and finish), each at least 50%
  of raw COPY of the same rows (issue 23), with 16 clients and with 256;
- sdk_load.py: the real Python SDK as the client, 4 processes of 50 asyncio
  agents each, next to the same rows posted raw over HTTP in as many
  processes (batched as the SDK batches at its fullest), three rounds in turn:
  committed steps/s and the median ratio; every step the agents made is in the
  database (issue 23);
- otlp.py: the OTLP issue's agent fleet through the OpenTelemetry SDK's batch
  exporter, three rounds of keelwave's /v1/traces, keelwave's own SDK with the same
  steps, and Arize Phoenix fed the same spans (when the `phoenix` command is
  there): OTLP at least 100x Phoenix and at least half of native ingest (median
  round), every run, step and model call stored (issues 18 and 23); and one long
  run sent ten spans an export, its store time a step (no target);
- memory: the server's resident size, sampled once a second under each load
  above, is flat: the second half of a load never needs more than 10% above
  what the first half reached (issue 23);
- scale.py (with --scale-db, a database kept by `scale.py --keep`): the
  aggregates, run lists and a 10,000-step run's timeline within budget on 50
  million steps over 30 days (issue 23);
- queries.py: every endpoint within its p95 budget on 250,000 runs / 5
  million steps / 7 days (built first, about five minutes on 2 cores, unless
  --queries-db names a database kept earlier with `queries.py --keep`);
- sdk_overhead.py: the Python SDK adds under 10 µs to an observed call;
- cli_startup.py: `keelwave --help`, `keelwave runs --help` and
  `keelwave --version` each start and exit in under 0.3 s (median), next to
  `python -c "import typer"` in the same run;
- peer_phoenix.py: at least 100x Arize Phoenix's throughput on the same
  agent runs (skipped, and said so, when the `phoenix` command is missing).

The load generators run on the same machine as the server: a busy machine
measures lower, so read the ratios, which compare figures from the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
MEMORY_SLACK = 0.10  # see memory_row
# otlp.py's runs per agent: three times its default, so that each OTLP round lasts
# long enough (about 15 s on 2 cores) for its memory to say something
OTLP_RUNS_PER_AGENT = 30
WORKLOAD_CLIENTS = (16, 256)
BENCHMARKS = ("ingest", "workloads", "sdk-load", "otlp", "queries", "sdk", "cli", "peer")


def run(script: str, arguments: list[str], results: Path) -> dict | list | None:
    """Run bench/<script> (its output goes straight to the terminal); its JSON, if it ran."""
    print(f"\n$ python bench/{script} {' '.join(arguments)}", flush=True)
    command = [sys.executable, str(HERE / script), *arguments, "--json", str(results)]
    if subprocess.run(command).returncode != 0:
        print(f"bench/{script} failed", flush=True)
        return None
    return json.loads(results.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10, help="per ingest workload")
    parser.add_argument("--queries-db", help="a database kept by `queries.py --keep NAME`")
    parser.add_argument(
        "--scale-db", help="a 50M-step database kept by `scale.py --keep NAME` (else skipped)"
    )
    parser.add_argument("--phoenix", default="phoenix", help="the `phoenix` command")
    parser.add_argument("--runs", type=int, default=1000, help="agent runs for the peer")
    parser.add_argument("--skip", nargs="*", default=[], choices=BENCHMARKS)
    args = parser.parse_args()

    rows: list[tuple[str, str, str, bool | None]] = []  # what, measured, target, met
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch)
        if "ingest" not in args.skip:
            for where, extra in (("", []), (", embedded", ["--embedded"])):
                arguments = ["--seconds", str(args.seconds), "--rss", *extra]
                if ingest := run("ingest.py", arguments, out / "i.json"):
                    rows += _ingest_rows(ingest, where)
        if "workloads" not in args.skip:
            # Its default 16 clients, then many more: the server's CPU a step hardly
            # changes, how busy the clients keep the machine does (docs/benchmarks.md).
            for clients in WORKLOAD_CLIENTS:
                arguments = ["--seconds", str(args.seconds), "--clients", str(clients)]
                for load in run("workloads.py", arguments, out / "w.json") or []:
                    ratio = load["ratio_steps"]
                    what = f"workload {load['workload']}, {clients} clients"
                    rows.append((what,
                                 f"{load['steps_per_s']:,.0f} steps/s = {ratio:.0%} of COPY, "
                                 f"{load['server_cpu_us_per_step']:.0f} µs server CPU/step",
                                 "≥ 50% of COPY", ratio >= 0.5))  # fmt: skip
                    rows.append(memory_row(what, load["rss_mib"]))
        if "sdk-load" not in args.skip:
            arguments = ["--seconds", str(args.seconds), "--modes", "sdk", "raw", "--repeat", "3"]
            if loads := run("sdk_load.py", arguments, out / "l.json"):
                rows.append(_sdk_load_row(loads))
                sdk_rounds = [r for r in loads if r["mode"] == "sdk"]
                rows.append(memory_row("real SDK", sdk_rounds[0]["rss_mib"]))
            else:  # it exits non-zero when the database lacks what the agents made
                rows.append(("real SDK", "failed: see its output", "all stored", False))
        if "otlp" not in args.skip:
            rows += _otlp_rows(args, out)
        if "queries" not in args.skip:
            where = ["--reuse", args.queries_db] if args.queries_db else []
            queries = run("queries.py", where, out / "q.json")
            if queries:
                for label, p50, p95, budget in queries["endpoints"]:
                    target = f"p95 ≤ {budget} ms" if budget else ""
                    met = None if budget is None else p95 <= budget
                    rows.append((f"GET {label}", f"p50 {p50:.1f} / p95 {p95:.1f} ms", target, met))
        if args.scale_db:  # building it takes about half an hour: only when kept before
            if scale := run("scale.py", ["--reuse", args.scale_db], out / "x.json"):
                for row in scale["endpoints"]:
                    budget = row["budget_ms"]
                    met = None if budget is None else row["p95_ms"] <= budget
                    rows.append((f"10× data: {row['endpoint']}",
                                 f"p50 {row['p50_ms']:.1f} / p95 {row['p95_ms']:.1f} ms",
                                 f"p95 ≤ {budget} ms" if budget else "", met))  # fmt: skip
        else:
            rows.append(("10× data (bench/scale.py)", "skipped: no --scale-db", "", None))
        if "sdk" not in args.skip:
            sdk = run("sdk_overhead.py", [], out / "s.json")
            if sdk:
                added = sdk["keelwave_us"] - sdk["bare_us"]
                rows.append(("SDK: added per observed call", f"{added:.1f} µs", "< 10 µs",
                             added < 10))  # fmt: skip
        if "cli" not in args.skip and (cli := run("cli_startup.py", [], out / "c.json")):
            rows += _cli_rows(cli)
        if "peer" not in args.skip:
            if shutil.which(args.phoenix) is None:
                rows.append(("Arize Phoenix, same workload", f"skipped: no {args.phoenix!r}",
                             "≥ 100×", None))  # fmt: skip
            else:
                arguments = ["--phoenix", args.phoenix, "--runs", str(args.runs)]
                peer = run("peer_phoenix.py", arguments, out / "p.json")
                if peer:
                    ratio = peer["keelwave"] / peer["phoenix"]
                    rows.append((f"vs Phoenix, {peer['runs']} runs × 20 steps",
                                 f"{peer['keelwave']:,.0f} vs {peer['phoenix']:,.0f} steps/s "
                                 f"= {ratio:.0f}×", "≥ 100×", ratio >= 100))  # fmt: skip

    print(f"\nSummary — python {sys.version.split()[0]} ({sys.executable}), "
          f"{os.cpu_count()} cores")  # fmt: skip
    width = max(len(what) for what, *_ in rows) + 2 if rows else 10
    measured_width = max([44, *(len(measured) + 2 for _, measured, *_ in rows)])
    for what, measured, target, met in rows:
        verdict = {True: "ok", False: "MISSED", None: ""}[met]
        print(f"{what:<{width}}{measured:<{measured_width}}{target:<16}{verdict}")
    if any(met is False for *_, met in rows):
        sys.exit(1)


def _otlp_rows(args: argparse.Namespace, out: Path) -> list[tuple[str, str, str, bool | None]]:
    """OTLP against Phoenix and against native ingest, each the median of three rounds;
    whether every run, step and model call sent was stored; memory under OTLP."""
    phoenix = shutil.which(args.phoenix) is not None
    skip = ["decode", "insert", "profile", *([] if phoenix else ["phoenix"])]
    arguments = ["--repeat", "3", "--runs", str(OTLP_RUNS_PER_AGENT), "--phoenix", args.phoenix,
                 "--skip", *skip]  # fmt: skip
    found = run("otlp.py", arguments, out / "o.json")
    if not found or "summary" not in found:
        return [("OTLP (bench/otlp.py)", "failed: see its output", "", False)]
    summary, rows = found["summary"], []
    if phoenix:
        vs = statistics.median(summary["otlp_vs_phoenix"])
        rows.append(("OTLP vs Phoenix, same spans", f"{vs:.0f}× (median of 3)", "≥ 100×",
                     vs >= 100))  # fmt: skip
    else:
        rows.append(("OTLP vs Phoenix", f"skipped: no {args.phoenix!r}", "≥ 100×", None))
    vs = statistics.median(summary["otlp_vs_native"])
    rates = statistics.median(summary["otlp"]["steps_per_s"])
    rows.append(("OTLP vs native ingest, same steps",
                 f"{rates:,.0f} steps/s = {vs:.2f}× native (median of 3)", "≥ 0.5×",
                 vs >= 0.5))  # fmt: skip
    complete = all(r[system]["complete"] for r in found["rounds"] for system in ("otlp", "native"))
    rows.append(("OTLP and native: all stored", "yes" if complete else "NO: see its output",
                 "all stored", complete))  # fmt: skip
    rows.append(memory_row("OTLP", summary["otlp"]["rss_mib"][0]))
    if long_run := found.get("long"):  # (no target: how a run still going costs)
        what = f"OTLP, one {long_run['steps']:,}-step run, 10 spans an export"
        rows.append((what, f"{long_run['us_per_step']:,.0f} µs of store time a step", "", None))
    return rows


def memory_row(load: str, samples: list[float]) -> tuple[str, str, str, bool | None]:
    """The server's memory under a load, flat when the second half of the samples never
    went more than MEMORY_SLACK above the first half's largest (which holds the caches
    filling up)."""
    what = f"server memory, {load}"
    if len(samples) < 4:
        return what, f"{len(samples)} samples: too short a load to tell", "flat", None
    half = len(samples) // 2
    early, late = max(samples[:half]), max(samples[half:])
    measured = (f"{samples[0]:.0f} .. {max(samples):.0f} .. {samples[-1]:.0f} MiB "
                f"(first .. largest .. last, {len(samples)} s)")  # fmt: skip
    return what, measured, "flat", late <= early * (1 + MEMORY_SLACK)


def _cli_rows(cli: dict) -> list[tuple[str, str, str, bool | None]]:
    floor = cli["commands"][cli["floor"]]["median_s"]
    rows = []
    for label, row in cli["commands"].items():
        if label.startswith("keelwave"):
            measured = (f"{row['median_s']:.3f} s median, {row['best_s']:.3f} best, "
                        f"{row['median_s'] / floor:.1f}× typer")  # fmt: skip
            met = row["median_s"] < cli["target_s"]
            rows.append((f"CLI start-up: {label}", measured, f"< {cli['target_s']} s", met))
    return rows


def _sdk_load_row(loads: list[dict]) -> tuple[str, str, str, bool | None]:
    """The SDK's committed steps/s against raw HTTP of the same rows, from the round
    whose ratio is the median; the target is that nothing the agents made is missing."""
    sdk = {r.get("round", 1): r for r in loads if r["mode"] == "sdk"}
    raw = {r.get("round", 1): r for r in loads if r["mode"] == "raw"}
    rounds = sorted((sdk[n]["steps_per_s"] / raw[n]["steps_per_s"], n) for n in sdk if n in raw)
    ratio, middle = rounds[len(rounds) // 2]
    mine = sdk[middle]
    measured = (f"{mine['steps_per_s']:,.0f} steps/s = {ratio:.2f}× raw HTTP "
                f"({raw[middle]['steps_per_s']:,.0f}); client "
                f"{mine['client_cpu_us_per_step']:.0f} µs/step")  # fmt: skip
    lost = any(r["lost"] for r in loads)
    return (f"real SDK, {mine['processes']} processes × {mine['agents']} agents", measured,
            "all stored", not lost)  # fmt: skip


def _ingest_rows(ingest: dict, where: str) -> list[tuple[str, str, str, bool | None]]:
    batched, single, half = ingest["batched"], ingest["single"], ingest["half_rate"]
    ratio = batched["steps_per_s"] / ingest["copy_steps_per_s"]
    rss = ingest["rss_mib"]
    rows = [
        (f"ingest{where}, batched (100 steps/request)",
         f"{batched['steps_per_s']:,.0f} steps/s = {ratio:.0%} of COPY "
         f"({ingest['copy_steps_per_s']:,.0f})", "≥ 50% of COPY", ratio >= 0.5),
        (f"ingest{where}, single steps", f"{single['requests_per_s']:,.0f} requests/s",
         "≥ 3,000/s", single["requests_per_s"] >= 3000),
        (f"ingest{where}, single steps at half rate", f"p99 {half['p99_ms']:.1f} ms",
         "p99 < 50 ms",
         half["p99_ms"] < 50),
    ]  # fmt: skip
    if rss:
        rows.append(memory_row(f"batched ingest{where}", rss))
    return rows


if __name__ == "__main__":
    main()
