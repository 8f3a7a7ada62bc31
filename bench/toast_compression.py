"""What PostgreSQL's compression of large values costs: pglz (its default) against lz4.

    python bench/toast_compression.py [--rows 20000] [--rounds 2]

COPY of ``--rows`` rows of about 2.6 KB of JSON each (a step's tool output of the
size agents send: search results of varied words) into a table whose column is
compressed with each method, alternately, on the PostgreSQL at
KEELWAVE_BENCH_DATABASE_URL (default postgresql://postgres@127.0.0.1:5432/postgres),
in a scratch table. A row over about 2 KB is compressed before it is stored; the
time per row is the client's COPY and the server's work together, and the size
is the table's with its TOAST. Migration 0018 makes lz4 the database's default
where PostgreSQL has it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import string
import sys
import time

import psycopg

URL = os.environ.get("KEELWAVE_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def payload(rng: random.Random) -> str:
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 9))) for _ in range(400)]
    results = [
        {"title": " ".join(words[i : i + 8]), "snippet": " ".join(words[i + 8 : i + 40])}
        for i in range(0, 300, 40)
    ]
    return json.dumps({"query": " ".join(words[:20]), "results": results})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    rng = random.Random(1)
    rows = [payload(rng) for _ in range(args.rows)]
    print(f"python {sys.version.split()[0]}; {args.rows:,} rows of "
          f"{sum(map(len, rows)) // len(rows):,} bytes on average")  # fmt: skip
    with psycopg.connect(URL, autocommit=True) as conn:
        methods = [row[0] for row in conn.execute(
            "SELECT unnest(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
        )]  # fmt: skip
        try:
            for _ in range(args.rounds):
                for method in methods:
                    conn.execute("DROP TABLE IF EXISTS kw_bench_toast")
                    conn.execute(
                        f"CREATE TABLE kw_bench_toast (id int, v json COMPRESSION {method})"
                    )
                    started = time.perf_counter()
                    with conn.cursor() as cur, cur.copy("COPY kw_bench_toast FROM STDIN") as copy:
                        for n, row in enumerate(rows):
                            copy.write_row((n, row))
                    took = time.perf_counter() - started
                    [(size,)] = conn.execute("SELECT pg_total_relation_size('kw_bench_toast')")
                    print(f"{method:5} {took * 1e6 / len(rows):7.1f} µs a row, "
                          f"{size / 2**20:6.1f} MiB")  # fmt: skip
        finally:
            conn.execute("DROP TABLE IF EXISTS kw_bench_toast")


if __name__ == "__main__":
    main()
