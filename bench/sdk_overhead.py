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
keelwave is measured with its redaction on (the default) and off.

Then redaction alone, on a typical step input of about 500 bytes of JSON:
microseconds for its canonical JSON (for scale), for redacting it when it holds
no secret (the screen: a few substring searches, the text kept as it is), when
it holds "max_tokens" and the like (still the screen), and when it holds two
secrets (parsed, walked and written again); and what an observed call with
that input costs, redaction on and off.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import sys
import threading
import time
import timeit


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


def measure_keelwave(sink: str, calls: int, redact: bool = True) -> float:
    from keelwave import Keelwave

    client = Keelwave(api_key="kw_" + "x" * 43, endpoint=sink, max_queue=10_000_000,
                      redact=redact)  # fmt: skip
    observed = client.observe(name="web_search")(tool)
    with client.run("bench"):
        result = per_call(observed, calls)
    client.flush(60)
    client.shutdown()
    return result


# A typical step input, about 500 bytes as canonical JSON: a search tool's arguments.
STEP_INPUT = {
    "query": "latest quarterly revenue of ACME corp in europe",
    "filters": {"region": "eu", "year": 2024, "sources": ["news", "filings", "blogs"]},
    "max_results": 10,
    "model": "gpt-4o-mini",
    "temperature": 0.2,
    "headers": {"Accept": "application/json", "User-Agent": "research-agent/1.0"},
    "url": "https://example.com/search?q=acme+revenue&page=2",
    "notes": "compare with last year's numbers and summarise the differences in two sentences",
}
WITH_COUNTS = {**STEP_INPUT, "max_tokens": 512, "token_count": 37}
WITH_SECRETS = {
    **STEP_INPUT,
    "headers": {**STEP_INPUT["headers"], "Authorization": "Bearer 9f8e7d6c5b4a39281706f5e4"},
    "url": STEP_INPUT["url"] + "&api_key=abc123def456",
}


def measure_redaction(sink: str, calls: int, rounds: int = 10) -> dict:
    """Each figure the best of ``rounds``, the rounds interleaved (on, off, on…) so that
    a busy machine slows them alike."""
    from keelwave import Keelwave
    from keelwave.sdk import Redaction, canonical_json

    redaction = Redaction()
    inputs = {"clean": STEP_INPUT, "counts": WITH_COUNTS, "secrets": WITH_SECRETS}
    texts = {name: canonical_json(value) for name, value in inputs.items()}
    timed = {"canonical_us": lambda: canonical_json(STEP_INPUT)}
    for name, text in texts.items():
        timed[f"redact_{name}_us"] = lambda t=text: redaction.redact_json(t)
    clients = []
    for redact in (True, False):
        client = Keelwave(api_key="kw_" + "x" * 43, endpoint=sink, max_queue=10_000_000,
                          redact=redact)  # fmt: skip
        observed = client.observe(name="search")(lambda **kwargs: {"hits": 3})
        clients.append((client, observed, "on" if redact else "off"))
    result = {"bytes": len(texts["clean"])}
    for _ in range(rounds):
        for key, func in timed.items():
            result[key] = min(result.get(key, 1e9), timeit.timeit(func, number=calls) / calls * 1e6)
        for client, observed, state in clients:
            with client.run("bench"):
                for name, value in (("clean", STEP_INPUT), ("secrets", WITH_SECRETS)):
                    key = f"observe_{name}_{state}_us"
                    took = timeit.timeit(lambda f=observed, v=value: f(**v), number=calls)
                    result[key] = min(result.get(key, 1e9), took / calls * 1e6)
            client.flush(60)  # the sender catches up between rounds, as an agent's would
    for client, _, _ in clients:
        client.shutdown()
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
    unredacted = measure_keelwave(sink, args.calls, redact=False)
    peer = measure_langfuse(sink, args.calls // 10)  # it is slower: fewer calls suffice
    redaction = measure_redaction(sink, max(500, args.calls // 50))

    print(
        f"python: {sys.executable} ({sys.version.split()[0]}); {os.cpu_count()} cores; "
        f"{args.calls} calls"
    )
    print(f"{'':<28}{'µs/call':>10}{'added µs':>10}")
    print(f"{'bare function':<28}{bare:>10.2f}{'':>10}")
    print(f"{'keelwave @observe':<28}{ours:>10.2f}{ours - bare:>10.2f}")
    print(f"{'  … with redact=False':<28}{unredacted:>10.2f}{unredacted - bare:>10.2f}")
    if peer is None:
        print("langfuse @observe: not installed (pip install langfuse)")
    else:
        print(f"{'langfuse @observe':<28}{peer:>10.2f}{peer - bare:>10.2f}")
        print(f"langfuse adds {(peer - bare) / (ours - bare):.1f}x what keelwave adds")
    r = redaction
    print(f"\nredaction of a {r['bytes']}-byte step input (µs; canonical JSON alone: "
          f"{r['canonical_us']:.2f})")  # fmt: skip
    print(f"{'':<34}{'redact':>8}{'observe, on':>13}{'observe, off':>14}")
    print(f"{'no secret':<34}{r['redact_clean_us']:>8.2f}{r['observe_clean_on_us']:>13.2f}"
          f"{r['observe_clean_off_us']:>14.2f}")  # fmt: skip
    print(f"{'no secret, max_tokens, token_count':<34}{r['redact_counts_us']:>8.2f}")
    print(f"{'a bearer token and an api_key':<34}{r['redact_secrets_us']:>8.2f}"
          f"{r['observe_secrets_on_us']:>13.2f}{r['observe_secrets_off_us']:>14.2f}")  # fmt: skip
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"bare_us": bare, "keelwave_us": ours, "keelwave_unredacted_us": unredacted,
                       "langfuse_us": peer, "redaction": redaction}, file)  # fmt: skip


if __name__ == "__main__":
    main()
