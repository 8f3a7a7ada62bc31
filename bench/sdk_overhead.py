"""What an observed tool call costs the agent's thread, against a bare call and a peer SDK.

    python bench/sdk_overhead.py [--calls 100000]

Three ways to call the same small tool, each many times, in one process:

1. the bare function;
2. keelwave's ``@client.observe`` inside a run (events go to a local sink
   that answers 200 to everything, so the transport really sends);
3. langfuse's ``@observe`` inside an observed parent, exporting to the same
   kind of sink, if langfuse is installed (``pip install langfuse``).

Reported: microseconds per call, and what each decorator adds to the bare
call. The sender threads run during the measurement, as they would in an agent.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import sys
import threading
import time


class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = b'{"data": {}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def start_sink() -> str:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def per_call(func, calls: int) -> float:
    """Best of three rounds, in microseconds per call."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for i in range(calls):
            func(q="what is keelwave?", max_results=i % 5)
        best = min(best, (time.perf_counter() - started) / calls * 1e6)
    return best


def tool(q: str, max_results: int = 3) -> dict:
    return {"results": [q] * max_results}


def measure_keelwave(sink: str, calls: int) -> float:
    from keelwave import Keelwave

    client = Keelwave(api_key="kw_" + "x" * 43, endpoint=sink, max_queue=10_000_000)
    observed = client.observe(name="web_search")(tool)
    with client.run("bench"):
        result = per_call(observed, calls)
    client.flush(60)
    return result


def measure_langfuse(sink: str, calls: int) -> float | None:
    try:
        from langfuse import Langfuse, observe
    except ImportError:
        return None
    langfuse = Langfuse(public_key="pk-lf-bench", secret_key="sk-lf-bench", host=sink)
    observed = observe(name="web_search")(tool)
    result = {}

    @observe(name="bench")
    def parent() -> None:
        result["us"] = per_call(observed, calls)

    parent()
    langfuse.flush()
    return result["us"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--json", help="also write the results to this file (bench/all.py)")
    args = parser.parse_args()
    sink = start_sink()
    bare = per_call(tool, args.calls)
    ours = measure_keelwave(sink, args.calls)
    peer = measure_langfuse(sink, args.calls // 10)  # it is slower: fewer calls suffice

    print(
        f"python: {sys.executable} ({sys.version.split()[0]}); {os.cpu_count()} cores; "
        f"{args.calls} calls"
    )
    print(f"{'':<28}{'µs/call':>10}{'added µs':>10}")
    print(f"{'bare function':<28}{bare:>10.2f}{'':>10}")
    print(f"{'keelwave @observe':<28}{ours:>10.2f}{ours - bare:>10.2f}")
    if peer is None:
        print("langfuse @observe: not installed (pip install langfuse)")
    else:
        print(f"{'langfuse @observe':<28}{peer:>10.2f}{peer - bare:>10.2f}")
        print(f"langfuse adds {(peer - bare) / (ours - bare):.1f}x what keelwave adds")
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"bare_us": bare, "keelwave_us": ours, "langfuse_us": peer}, file)


if __name__ == "__main__":
    main()
