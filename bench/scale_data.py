"""The rows of bench/scale.py's data set, as SQL that PostgreSQL runs to generate them.

A plan holds one row per run (agent, start, number of steps, what kind of run it
is, where its pattern begins), every choice drawn from a hash of the run's number,
so a build is the same every time. Steps and model calls are generated from the
plan (``generate_series`` per run), tool payloads from templates (a few thousand
JSON texts made here with json.dumps, the step index put in at generation), and
the runs from the plan with their counters counted from the generated rows. The
rollups are filled from the rows with the SQL the server itself runs
(tool_rollups.py) or its exact equivalent per run row (ROLLUP_SHARES).

Why each run's findings are known without running the detectors: every normal
tool call has the step index in its input and output, so a normal run repeats
nothing; the special calls (SPECIAL) are built to be exactly one kind of finding
(findings/detectors.py), and ``bench/scale.py --verify`` checks that the server's
detectors agree on every run.
"""

from __future__ import annotations

import json
import math
import random
from datetime import datetime

import psycopg

from keelwave.server.store import recount

AGENTS = (
    "agent-support",
    "agent-research",
    "agent-coder",
    "agent-triage",
    "agent-sql",
    "agent-planner",
    "agent-browser",
    "agent-writer",
    "agent-review",
    "agent-search",
    "agent-ops",
    "agent-data",
)
TOOLS = (
    "web_search",
    "fetch_url",
    "sql_query",
    "read_file",
    "write_file",
    "run_tests",
    "call_api",
    "summarize",
)
# (provider, model, $ per million input tokens, per million output tokens)
MODELS = (
    ("openai", "gpt-4o-mini", 0.15, 0.6),
    ("openai", "gpt-4o", 2.5, 10.0),
    ("anthropic", "claude-sonnet-4", 3.0, 15.0),
    ("google", "gemini-2.0-flash", 0.1, 0.4),
)
TOPICS = (
    "refund policy",
    "invoice totals",
    "flaky test",
    "rate limits",
    "onboarding flow",
    "database migration",
    "pricing tiers",
    "latency regression",
    "login errors",
    "export to csv",
    "webhook retries",
    "search ranking",
    "quarterly report",
    "memory leak",
    "access control",
    "shipping delays",
)
# Free text for payloads: lower-case words only, so nothing in it looks volatile
# (findings/normalise.py) or secret (redaction) and nothing needs JSON escaping.
LOREM = (
    "the agent looked at the previous answer and decided to check the source again "
    "because the numbers did not add up with what the customer reported in the ticket "
    "so it gathers the relevant records compares them with the summary and writes down "
    "what changed between the two versions before it moves on to the next part of the "
    "task which is to draft a reply that explains the difference in plain words and "
    "lists the steps the customer can take if the problem happens again next week "
)
LONG_RUN_STEPS = 10_000


def agent_names(count: int) -> tuple[str, ...]:
    """``count`` agents: the twelve above, then agent-13, agent-14, … (``--agents``).
    The first is the busiest, the last the quietest."""
    if count < 1:
        raise SystemExit("--agents must be at least 1")
    return AGENTS[:count] + tuple(f"agent-{n}" for n in range(len(AGENTS) + 1, count + 1))


def tool_name(k: int, tools: int) -> str:
    """The tool of normal template ``k`` when the data set has ``tools`` tools (``--tools``).

    The payload is always that of TOOLS[k % 8]; past eight tools each of those
    has variants (``web_search_7``), the first far more used than the last, as
    a few tools of a real project take most of its calls."""
    base = TOOLS[k % len(TOOLS)]
    variants = -(-tools // len(TOOLS))
    variant = int(variants * ((k // len(TOOLS)) / (NORMAL_TEMPLATES // len(TOOLS))) ** 2)
    return base if variant == 0 else f"{base}_{variant}"


SEED = 23  # the number: change it for another data set of the same shape


def uniform(expr: str, k: int) -> str:
    """SQL for a number in (0, 1) drawn from ``expr`` (a bigint) and stream ``k``."""
    return (
        f"(((hashint8extended(({expr})::bigint, {SEED * 1000 + k}) & 140737488355327)::float8"
        " + 0.5) / 140737488355328.0)"
    )


def exponential_mean(steps_per_run: float) -> float:
    """The mean of the exponential that gives ``steps_per_run`` steps per run on average,
    with 0.2% long runs of 1,100 steps and looping runs of at least 8 steps."""
    normal = (steps_per_run - 0.002 * 1100 - 0.2) / 0.998
    if normal < 2:
        raise SystemExit("--steps / --runs must be at least 5")
    return 1 / math.log(1 + 1 / (normal - 1))


def _array(values: tuple[str, ...]) -> str:
    return "ARRAY[" + ", ".join(f"'{v}'" for v in values) + "]"


# One row per run. kind: normal, exact (the second half repeats one call), cycle
# (the second half alternates two calls), near (three inputs equal but for case and
# whitespace), stuck (three different inputs, one empty answer); b: where that begins.
PLAN = """
CREATE UNLOGGED TABLE kw_scale.plan AS
WITH drawn AS (
    SELECT n, {u_agent} AS u_agent, {u_start} AS u_start, {u_kind} AS u_kind,
           {u_kind2} AS u_kind2, {u_len} AS u_len, {u_long} AS u_long,
           {u_long_len} AS u_long_len, {u_b} AS u_b, {u_gap} AS u_gap, {u_tail} AS u_tail,
           {u_reason} AS u_reason, {u_reported} AS u_reported, {u_child} AS u_child,
           {u_model} AS u_model, {u_env} AS u_env, {u_v2} AS u_v2, {u_rare} AS u_rare,
           {u_user} AS u_user
    FROM generate_series(1::bigint, {runs}) AS n
), shaped AS (
    SELECT *,
        CASE WHEN n = {long_n} THEN 'exact'
             WHEN u_kind < 0.125 THEN CASE WHEN u_kind2 < 0.6 THEN 'exact' ELSE 'cycle' END
             WHEN u_kind < 0.145 THEN 'near' WHEN u_kind < 0.165 THEN 'stuck'
             ELSE 'normal' END AS kind,
        CASE WHEN n = {long_n} THEN {long_steps}
             WHEN u_long < 0.002 THEN 200 + floor(u_long_len * 1800)::int
             ELSE 1 + floor(-ln(u_len) * {mean})::int END AS drawn_steps
    FROM drawn
), sized AS (
    SELECT *, CASE WHEN kind = 'normal' THEN drawn_steps ELSE greatest(drawn_steps, 8) END
                  AS n_steps
    FROM shaped
), placed AS (
    SELECT *,
        CASE kind WHEN 'exact' THEN n_steps / 2 + 1 WHEN 'cycle' THEN n_steps / 2 + 1
                  WHEN 'near' THEN 1 + floor(u_b * (n_steps - 4))::int
                  WHEN 'stuck' THEN 1 + floor(u_b * (n_steps - 2))::int END AS b,
        CASE WHEN kind IN ('exact', 'cycle') AND u_reason < 0.5 THEN 'loop_detected'
             WHEN u_reason < 0.76 THEN 'clean' WHEN u_reason < 0.84 THEN 'error'
             WHEN u_reason < 0.89 THEN 'max_steps_reached' WHEN u_reason < 0.94 THEN 'context_limit'
             ELSE 'timeout' END AS reason,
        600 + floor(u_gap * 1800)::int AS gap_ms,
        timestamptz '{base}' - interval '{days} days' * (({runs} - n + u_start) / {runs})
            AS started_at
    FROM sized
)
SELECT n, md5('kw-scale-run-{seed}-' || n)::uuid AS id,
       CASE WHEN n = {long_n} THEN 'agent-research'
            ELSE ({agents})[1 + floor({n_agents} * power(u_agent, 1.6))::int] END AS agent_name,
       CASE WHEN n > 1 AND n <> {long_n} AND u_child < 0.03
            THEN md5('kw-scale-run-{seed}-' || (n - 1))::uuid END AS parent_run_id,
       started_at, n_steps, kind, b, reason, gap_ms,
       started_at + (n_steps * gap_ms + 200 + floor(u_tail * 5000)::int)
                    * interval '1 millisecond' AS ended_at,
       kind IN ('exact', 'cycle') AND (reason = 'loop_detected' OR u_reported < 0.5)
           AS reported_loop,
       1 + floor(u_model * 4)::int AS model_no,
       ({topics})[1 + n % {n_topics}] AS topic,
       array_remove(ARRAY[
           CASE WHEN u_env < 0.7 THEN 'prod' WHEN u_env < 0.95 THEN 'staging' END,
           CASE WHEN u_v2 < 0.4 THEN 'v2' END,
           CASE WHEN u_rare < 0.005 THEN 'canary' END,
           CASE WHEN u_rare < 0.0005 THEN 'experiment-42' END,
           CASE WHEN u_rare < 0.00005 THEN 'customer:acme' END], NULL)::text[] AS tags,
       'user-' || floor(50000 * power(u_user, 3))::int AS user_id
FROM placed
"""


def plan_sql(
    runs: int, steps: int, base: datetime, days: float, agents: tuple[str, ...] = AGENTS
) -> str:
    streams = (
        "agent",
        "start",
        "kind",
        "kind2",
        "len",
        "long",
        "long_len",
        "b",
        "gap",
        "tail",
        "reason",
        "reported",
        "child",
        "model",
        "env",
        "v2",
        "rare",
        "user",
    )
    return PLAN.format(
        runs=runs,
        long_n=long_run_number(runs),
        long_steps=LONG_RUN_STEPS,
        mean=repr(exponential_mean(steps / runs)),
        base=base.isoformat(),
        days=days,
        seed=SEED,
        agents=_array(agents),
        n_agents=len(agents),
        topics=_array(TOPICS),
        n_topics=len(TOPICS),
        **{f"u_{name}": uniform("n", k) for k, name in enumerate(streams)},
    )


def long_run_number(runs: int) -> int:
    """The 10,000-step run starts about a day before the end of the 30 days."""
    return max(1, runs - runs // 30)


# Steps are made from templates: a tool call's input and output are a template's
# text with the step index put in (``head || i || tail``), so the index makes each
# input unique within its run (a normal run has no finding), and generating a step
# costs a hash, a join and two concatenations, not the building of two JSON texts.
STEP_MARK = "999999937"  # where the step index goes, then split on
NORMAL_TEMPLATES = 4096  # tool call templates 0..4095: the payload is TOOLS[k % 8]'s
THINK_TEMPLATES = 4096  # 64 of them, then one llm_call step
LLM_CALL_TEMPLATE = 4160
# The calls that make findings, and their keys.
SPECIAL = {
    "loop": 4200,
    "cycle_a": 4201,
    "cycle_b": 4202,
    "near0": 4203,
    "near1": 4204,
    "near2": 4205,
    "stuck": 4206,
}


def _split(text: str | None) -> tuple[str | None, str | None]:
    """(head, tail) of a template; tail None when the text has no step index in it."""
    if text is None:
        return None, None
    head, mark, tail = text.partition(STEP_MARK)
    return (head, tail) if mark else (head, None)


def _tool_call(k: int, words: list[str], pick) -> tuple[dict, dict]:  # noqa: ANN001
    """Input and output of normal tool call template ``k``."""
    v = k // len(TOOLS)
    topic = TOPICS[v % len(TOPICS)]
    step = int(STEP_MARK)
    slug = topic.replace(" ", "-")
    return {
        "web_search": (
            {
                "query": f"{topic} {pick(3, 6)}",
                "max_results": 5 + v % 6,
                "lang": "en",
                "context": pick(12, 30),
                "step": step,
            },
            {
                "results": [
                    {
                        "title": f"{topic} {pick(2, 5)}",
                        "url": f"https://example.com/a/{v}",
                        "snippet": pick(15, 30),
                    },
                    {
                        "title": f"more on {topic}",
                        "url": f"https://example.com/b/{v}",
                        "snippet": pick(10, 20),
                    },
                ],
                "total": v * 13,
                "step": step,
            },
        ),
        "fetch_url": (
            {
                "url": f"https://docs.example.com/{slug}/{v}",
                "timeout_s": 30,
                "headers": {"accept": "text/html"},
                "purpose": pick(10, 25),
                "step": step,
            },
            {"status": 200, "content_type": "text/html", "text": pick(40, 70), "step": step},
        ),
        "sql_query": (
            {
                "sql": "SELECT id, status, total FROM orders WHERE region = 'emea' "
                f"AND batch = {v} ORDER BY created_at DESC LIMIT 50",
                "database": "analytics",
                "purpose": pick(5, 15),
                "step": step,
            },
            {
                "rows": [[v, "shipped", 12.5], [v + 1, "open", 3.25], [v + 2, "late", 40.0]],
                "row_count": 3,
                "elapsed_ms": 3 + v % 40,
                "note": pick(10, 25),
                "step": step,
            },
        ),
        "read_file": (
            {
                "path": f"src/module_{v}/part.py",
                "encoding": "utf-8",
                "reason": pick(10, 25),
                "step": step,
            },
            {"content": pick(40, 70), "lines": 10 + v % 300, "step": step},
        ),
        "write_file": (
            {"path": f"out/report_{v}.md", "content": pick(25, 50), "step": step},
            {"bytes_written": 100 + v, "path": f"out/report_{v}.md", "step": step},
        ),
        "run_tests": (
            {
                "command": f"pytest tests/test_{v}.py -k case",
                "cwd": "/workspace",
                "timeout_s": 600,
                "note": pick(8, 20),
                "step": step,
            },
            {"passed": v % 40, "failed": 0, "output": pick(30, 50), "step": step},
        ),
        "call_api": (
            {
                "method": "POST",
                "endpoint": f"/v2/tickets/{v}/comments",
                "body": {"text": pick(15, 35)},
                "step": step,
            },
            {"status": 201, "comment_id": v, "thread": pick(15, 30), "step": step},
        ),
        "summarize": (
            {"text": pick(35, 60), "max_words": 120, "step": step},
            {"summary": pick(30, 50), "words": 40 + v % 80, "step": step},
        ),
    }[TOOLS[k % len(TOOLS)]]


def step_templates(tools: int = len(TOOLS)) -> list[tuple]:
    """Rows of kw_scale.templates: (k, step_type, tool_name, input head, tail, output head,
    tail, content head, tail). JSON texts come from json.dumps, so they are valid."""
    if tools < len(TOOLS) or tools > NORMAL_TEMPLATES:
        raise SystemExit(f"--tools must be from {len(TOOLS)} to {NORMAL_TEMPLATES}")
    rng = random.Random(SEED)
    words = LOREM.split()

    def pick(low: int, high: int) -> str:
        start, count = rng.randrange(len(words)), rng.randint(low, high)
        return " ".join((words * 3)[start : start + count])

    rows = []
    for k in range(NORMAL_TEMPLATES):
        tool_input, tool_output = _tool_call(k, words, pick)
        rows.append(
            (
                k,
                "tool_call",
                tool_name(k, tools),
                *_split(json.dumps(tool_input)),
                *_split(json.dumps(tool_output)),
                None,
                None,
            )
        )
    for k in range(64):
        thought = f"Looking at {TOPICS[k % len(TOPICS)]} again: {pick(8, 20)} (step {STEP_MARK})"
        rows.append((THINK_TEMPLATES + k, "think", None, None, None, None, None, *_split(thought)))
    rows.append(
        (
            LLM_CALL_TEMPLATE,
            "llm_call",
            None,
            None,
            None,
            None,
            None,
            "planning the next call",
            None,
        )
    )
    refunds = json.dumps(
        {
            "results": [{"title": "Refunds", "url": "https://example.com/refunds"}],
            "step": int(STEP_MARK),
        }
    )
    special = {  # role: (tool, input, output): the exact bytes matter here
        "loop": (
            "web_search",
            '{"query": "status of order 4412", "max_results": 5}',
            '{"results": [], "total": 0}',
        ),
        "cycle_a": (
            "web_search",
            '{"query": "pricing page", "max_results": 5}',
            '{"results": [{"title": "Pricing", "url": "https://example.com/pricing"}]}',
        ),
        "cycle_b": (
            "fetch_url",
            '{"url": "https://example.com/pricing"}',
            '{"status": 200, "text": "plans start at ten dollars a month"}',
        ),
        # Equal but for case and whitespace: a near-duplicate, not an exact loop.
        "near0": ("web_search", '{"query": "Refund policy for annual plans"}', refunds),
        "near1": ("web_search", '{"query":"refund policy for annual plans"}', refunds),
        "near2": ("web_search", '{"query": "REFUND POLICY  for annual plans "}', refunds),
        # Three different inputs, the same empty answer: no progress.
        "stuck": (
            "sql_query",
            json.dumps(
                {
                    "sql": f"SELECT * FROM invoices WHERE status = 'overdue' LIMIT {STEP_MARK}",
                    "database": "billing",
                }
            ),
            '{"rows": [], "row_count": 0}',
        ),
    }
    for role, (tool, tool_input, tool_output) in special.items():
        rows.append(
            (
                SPECIAL[role],
                "tool_call",
                tool,
                *_split(tool_input),
                *_split(tool_output),
                None,
                None,
            )
        )
    return rows


TEMPLATES_DDL = """
CREATE UNLOGGED TABLE kw_scale.templates (
    k int PRIMARY KEY, step_type text, tool_name text, in_head text, in_tail text,
    out_head text, out_tail text, content_head text, content_tail text,
    name_nul bytea  -- tool_name || 0x00, what the fingerprint hashes before the input
)
"""


def load_templates(conn: psycopg.Connection, tools: int = len(TOOLS)) -> None:
    conn.execute(TEMPLATES_DDL)
    with conn.cursor().copy(
        "COPY kw_scale.templates (k, step_type, tool_name, in_head, in_tail, out_head, out_tail, "
        "content_head, content_tail, name_nul) FROM STDIN"
    ) as copy:
        for row in step_templates(tools):
            copy.write_row((*row, row[2].encode() + b"\x00" if row[2] else None))


def _filled(column: str) -> str:
    return (
        f"CASE WHEN t.{column}_tail IS NULL THEN t.{column}_head "
        f"ELSE t.{column}_head || s.i || t.{column}_tail END"
    )


# Every step of every run of the plan, in the plan's order: (project, run, index, type,
# tool, input, output, content, fingerprint, started_at, duration_ms, error, received_at).
STEPS = f"""
SELECT '{{project}}'::uuid, run_id, i::int4, step_type, tool_name, tool_input{{json}},
       tool_output{{json}}, content,
       CASE WHEN tool_name IS NOT NULL THEN sha256(name_nul || textsend(tool_input)) END,
       started_at, duration_ms, error, started_at + duration_ms * interval '1 millisecond'
FROM (
    SELECT s.run_id, s.i, t.step_type, t.tool_name, t.name_nul, {_filled("in")} AS tool_input,
           CASE WHEN s.failed AND s.k < {NORMAL_TEMPLATES} THEN NULL ELSE {_filled("out")} END
               AS tool_output,
           {_filled("content")} AS content,
           CASE WHEN s.failed AND s.k < {NORMAL_TEMPLATES}
                THEN 'TimeoutError: the tool did not answer within 30 s' END AS error,
           s.started_at, s.duration_ms
    FROM (
        SELECT p.id AS run_id, i,
               CASE WHEN p.kind = 'exact' AND i >= p.b THEN {SPECIAL["loop"]}
                    WHEN p.kind = 'cycle' AND i >= p.b THEN {SPECIAL["cycle_a"]} + (i - p.b) % 2
                    WHEN p.kind = 'near' AND i IN (p.b, p.b + 2, p.b + 4)
                        THEN {SPECIAL["near0"]} + (i - p.b) / 2
                    WHEN p.kind = 'stuck' AND i BETWEEN p.b AND p.b + 2 THEN {SPECIAL["stuck"]}
                    WHEN (h & 1023) < 100 THEN {THINK_TEMPLATES} + ((h >> 10) & 63)
                    WHEN (h & 1023) < 150 THEN {LLM_CALL_TEMPLATE}
                    ELSE ((h >> 10) & {NORMAL_TEMPLATES - 1}) END::int AS k,
               (h & 1023) BETWEEN 150 AND 169 AS failed,
               p.started_at + ((i - 1) * p.gap_ms) * interval '1 millisecond' AS started_at,
               (p.gap_ms * (100 + ((h >> 21) & 1023) * 800 / 1024) / 1000.0)::float8 AS duration_ms
        FROM kw_scale.plan p
        CROSS JOIN LATERAL generate_series(1, p.n_steps) AS i
        CROSS JOIN LATERAL (
            SELECT hashint8extended(p.n * 100000 + i, {SEED}) AS h OFFSET 0
        ) AS hashed
    ) s
    JOIN kw_scale.templates t ON t.k = s.k
    OFFSET 0
) steps
"""
STEP_COLUMNS = (
    "project_id, run_id, step_index, step_type, tool_name, tool_input, tool_output, "
    "content, input_fingerprint, started_at, duration_ms, error, received_at"
)


def steps_sql(project: str, typed_json: bool = False) -> str:
    """The SELECT of every step. Binary COPY takes the payloads as text (json's binary
    form is its text, checked once, on the way in); an INSERT needs them cast."""
    return STEPS.format(project=project, json="::json" if typed_json else "")


# One model call per five steps (and one at the start), at the step it belongs to.
TRACES = """
SELECT '{project}'::uuid, md5('kw-scale-call-{seed}-' || p.n || '-' || j)::uuid, p.id,
       c.step_index, m.provider, m.model, c.input_tokens, c.output_tokens, c.cache_read_tokens,
       0::int8,
       round(((c.input_tokens * m.price_in + c.output_tokens * m.price_out) / 1e6)::numeric, 8)
           ::float8,
       c.latency_ms, c.status, c.error, c.started_at, c.started_at
FROM kw_scale.plan p
JOIN (VALUES {models}) AS m (model_no, provider, model, price_in, price_out)
    ON m.model_no = p.model_no
CROSS JOIN LATERAL generate_series(1, 1 + p.n_steps / 5) AS j
CROSS JOIN LATERAL (SELECT hashint8extended(p.n * 100000 + j, {seed} + 1) AS h) AS hashed
CROSS JOIN LATERAL (
    SELECT least(p.n_steps, (j - 1) * 5 + 1)::int4 AS step_index,
           (400 + (h & 8191) % 7600)::int8 AS input_tokens,
           (20 + ((h >> 13) & 1023) % 900)::int8 AS output_tokens,
           CASE WHEN ((h >> 23) & 3) = 0 THEN ((h & 8191) % 7600 / 2)::int8 ELSE 0::int8 END
               AS cache_read_tokens,
           (250 + ((h >> 25) & 4095) + 0.5)::float8 AS latency_ms,
           CASE WHEN ((h >> 37) & 127) = 0 THEN 'error' ELSE 'ok' END AS status,
           CASE WHEN ((h >> 37) & 127) = 0 THEN 'RateLimitError: 429 Too Many Requests' END
               AS error,
           p.started_at + (least(p.n_steps, (j - 1) * 5 + 1) - 1) * p.gap_ms
                          * interval '1 millisecond' AS started_at
) AS c
ORDER BY p.n, j
"""
TRACE_COLUMNS = (
    "project_id, id, run_id, step_index, provider, model, input_tokens, "
    "output_tokens, cache_read_tokens, reasoning_tokens, cost_usd, latency_ms, status, "
    "error, started_at, received_at"
)


def traces_sql(project: str) -> str:
    models = ", ".join(
        f"({k + 1}, '{provider}', '{model}', {price_in}::float8, {price_out}::float8)"
        for k, (provider, model, price_in, price_out) in enumerate(MODELS)
    )
    return TRACES.format(project=project, seed=SEED, models=models)


# The runs, with their counters counted from the rows: steps from agent_steps (an
# index-only scan of agent_steps_run_idx: FREEZE left it all-visible), calls, tokens
# and cost from ai_traces; the verdict from the plan (what the detectors find in
# those steps: --verify checks it). duration_ms as the finish path computes it.
RUNS = """
WITH steps AS (
    SELECT run_id, count(*) AS steps FROM agent_steps WHERE project_id = '{project}'
    GROUP BY run_id
), calls AS (
    SELECT run_id, count(*) AS calls, sum(input_tokens) AS input_tokens,
           sum(output_tokens) AS output_tokens, coalesce(sum(cost_usd), 0) AS cost_usd
    FROM ai_traces WHERE project_id = '{project}' GROUP BY run_id
)
SELECT '{project}'::uuid, p.id, p.agent_name, p.parent_run_id, p.started_at, p.ended_at,
       p.reason, p.reported_loop, CASE WHEN p.reported_loop THEN p.b END::int4,
       ('{{"task": "' || p.topic || ' (request ' || p.n || ')", "priority": "'
        || (ARRAY['low', 'normal', 'high'])[1 + p.n % 3] || '"}}')::json,
       CASE WHEN p.reason IN ('clean', 'max_steps_reached')
            THEN ('{{"answer": "done with ' || p.topic || '", "steps": ' || p.n_steps || '}}')::json
       END,
       ('{{"user_id": "' || p.user_id || '", "region": "'
        || (ARRAY['eu-west-1', 'us-east-1', 'ap-south-1'])[1 + p.n % 3]
        || '", "sdk_version": "1.' || p.n % 7 || '.0"}}')::json,
       p.tags,
       CASE WHEN p.reason = 'error' THEN 'ToolError: upstream service returned 503' END,
       p.started_at,
       greatest(0, extract(epoch FROM p.ended_at - p.started_at) * 1000)::float8,
       coalesce(s.steps, 0)::int4, coalesce(c.calls, 0)::int4,
       coalesce(c.input_tokens, 0)::int8, coalesce(c.output_tokens, 0)::int8,
       coalesce(c.cost_usd, 0)::float8,
       p.ended_at,
       p.kind IN ('exact', 'cycle'), CASE WHEN p.kind IN ('exact', 'cycle') THEN p.b END::int4,
       CASE p.kind WHEN 'exact' THEN '{{exact_loop}}' WHEN 'cycle' THEN '{{cycle,exact_loop}}'
                   WHEN 'near' THEN '{{near_duplicate}}' WHEN 'stuck' THEN '{{no_progress}}'
                   ELSE '{{}}' END::text[],
       coalesce(s.steps, 0)::int4,
       CASE WHEN p.reason = 'error' THEN 'Traceback (most recent call last):' || chr(10)
            || '  File "agent.py", line 88, in run' || chr(10)
            || 'ToolError: upstream service returned 503' END
FROM kw_scale.plan p
LEFT JOIN steps s ON s.run_id = p.id
LEFT JOIN calls c ON c.run_id = p.id
ORDER BY p.n
"""
RUN_COLUMNS = (
    "project_id, id, agent_name, parent_run_id, started_at, ended_at, "
    "termination_reason, loop_detected, loop_step_index, input, output, metadata, tags, "
    "error, received_at, duration_ms, step_count, llm_calls, input_tokens, "
    "output_tokens, cost_usd, last_activity_at, detected_loop, detected_loop_step_index, "
    "findings, verdict_steps, error_traceback"
)

# What the aggregates read, made from the loaded rows as `keelwave projects recount`
# makes it (keelwave/server/store/recount.py), with its SQL: ROLLUP_SHARES is what one
# agent_runs row adds to each counter of agent_run_rollups; TOOL_ROLLUPS runs per
# slice of whole hours (two at a time here); each statement takes %(project)s.
ROLLUP_SHARES = recount.RUN_SHARES
RUN_ROLLUPS = recount.RUN_ROLLUPS
DURATION_ROLLUPS = recount.DURATION_ROLLUPS
PROJECT_DURATION_ROLLUPS = recount.PROJECT_DURATION_ROLLUPS
TOOL_ROLLUPS = recount.TOOL_ROLLUPS
TOOL_ROLLUP_SETTINGS = recount.PLANNER
DAILY_ROLLUPS = recount.DAILY_ROLLUPS
WEEKLY_ROLLUPS = recount.WEEKLY_ROLLUPS
ROLLUP_TABLES = {  # table -> its key columns (without project_id)
    "agent_run_rollups": ("bucket", "agent_name"),
    "agent_duration_rollups": ("bucket", "agent_name", "duration_bin"),
    "agent_tool_rollups": ("bucket", "tool_name", "duration_bin"),
    "agent_duration_rollups_daily": ("day", "agent_name", "duration_bin"),
    "agent_run_rollups_daily": ("day", "agent_name"),
    "project_duration_rollups": ("bucket", "duration_bin"),
    "project_duration_rollups_daily": ("day", "duration_bin"),
    "agent_tool_rollups_daily": ("day", "tool_name", "duration_bin"),
    "agent_duration_rollups_weekly": ("week", "agent_name", "duration_bin"),
    "agent_tool_rollups_weekly": ("week", "tool_name", "duration_bin"),
}
LOADED_TABLES = ("agent_steps", "ai_traces", "agent_runs")
