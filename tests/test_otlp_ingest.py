"""POST /v1/traces against a real server and database: the captured traces of real
frameworks become runs, steps and model calls; exports split, reordered and retried
store exactly what one export does; the answers follow the OTLP specification."""

from __future__ import annotations

import asyncio
import copy
import gzip
import json
import time
import uuid
import zlib

import aiohttp
import psycopg
import pytest
from conftest import (
    Api,
    assert_sketches_stored,
    fold_pending_tool_rollups,
    make_project,
    make_settings,
    query,
    trigger_probe,
)
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from otlp_exports import ALL, document, export_of, spans_of, split, to_protobuf

from keelwave.server.app import create_app
from keelwave.server.ingest.otlp import decode, mapping, projection
from keelwave.server.ingest.otlp import export as otlp_export
from keelwave.server.store import traces

PROTOBUF = "application/x-protobuf"
LIMIT = 1 << 20  # the body limit of these tests' server


@pytest.fixture
async def api(db_url: str, aiohttp_server):
    """A real keelwave server with a 1 MiB body limit (the captured traces are large)."""
    settings = make_settings(max_body_bytes=LIMIT, otlp_max_body_bytes=LIMIT)
    server = await aiohttp_server(create_app(settings, db_url))
    async with aiohttp.ClientSession() as session:
        yield Api(str(server.make_url("")).rstrip("/"), session)


def headers(key: str, media: str = "application/json", **more: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "Content-Type": media, **more}


async def send(api, key: str, doc: dict, as_protobuf: bool = False) -> tuple[int, bytes]:
    body = to_protobuf(doc) if as_protobuf else json.dumps(doc).encode()
    media = PROTOBUF if as_protobuf else "application/json"
    async with api.session.post(
        api.url + "/v1/traces", data=body, headers=headers(key, media)
    ) as response:
        return response.status, await response.read()


def stored(db_url: str, project_id: str) -> dict[str, list[tuple]]:
    """Everything stored for a project's runs, without what says when it arrived (the
    tool calls left pending folded in first, as the server does every second)."""
    fold_pending_tool_rollups(db_url)
    project = uuid.UUID(project_id)
    return {
        "runs": query(
            db_url,
            "SELECT id, agent_name, parent_run_id, started_at, ended_at, termination_reason, "
            "duration_ms, loop_detected, loop_step_index, input::text, output::text, "
            "metadata::text, error, step_count, llm_calls, input_tokens, output_tokens, "
            "cost_usd FROM agent_runs WHERE project_id = %s ORDER BY id",
            (project,),
        ),
        "steps": query(
            db_url,
            "SELECT run_id, step_index, step_type, tool_name, tool_input::text, "
            "tool_output::text, input_fingerprint, started_at, duration_ms, error "
            "FROM agent_steps WHERE project_id = %s ORDER BY run_id, step_index",
            (project,),
        ),
        "calls": query(
            db_url,
            "SELECT id, run_id, step_index, provider, model, input_tokens, output_tokens, "
            "cache_read_tokens, reasoning_tokens, cost_usd, latency_ms, status, error, "
            "started_at FROM ai_traces WHERE project_id = %s ORDER BY id",
            (project,),
        ),
        "run_rollups": query(
            db_url,
            # In shards (migration 0016): a key's sum is what counts.
            "SELECT agent_name, bucket, sum(runs), sum(finished_runs), sum(loop_runs), "
            "sum(error_runs), sum(steps), sum(llm_calls), sum(input_tokens), "
            "sum(output_tokens), round(sum(cost_usd)::numeric, 9), "
            "round(sum(duration_ms_sum)::numeric, 6), "
            "sum(term_clean), sum(term_error), sum(term_max_steps_reached), "
            "sum(term_context_limit), sum(term_timeout) "
            "FROM agent_run_rollups WHERE project_id = %s GROUP BY 1, 2 HAVING sum(runs) <> 0 "
            "ORDER BY 1, 2",
            (project,),
        ),
        "tool_rollups": query(
            db_url,
            "SELECT bucket, tool_name, duration_bin, sum(calls), sum(runs), sum(repeated_calls), "
            "sum(error_calls) FROM agent_tool_rollups WHERE project_id = %s GROUP BY 1, 2, 3 "
            "HAVING sum(calls) <> 0 ORDER BY 1, 2, 3",
            (project,),
        ),
    }


def rollups_recomputed(db_url: str, project_id: str) -> list[tuple]:
    """The run rollups as they follow from the stored runs (what they must equal)."""
    return query(
        db_url,
        "SELECT agent_name, date_trunc('hour', started_at, 'UTC'), count(*)::int, "
        "count(termination_reason)::int, "
        "count(*) FILTER (WHERE loop_detected)::int, "
        "count(*) FILTER (WHERE termination_reason = 'error')::int, sum(step_count)::int, "
        "sum(llm_calls)::int, sum(input_tokens)::bigint, sum(output_tokens)::bigint, "
        "round(sum(cost_usd)::numeric, 9), round(coalesce(sum(duration_ms) "
        "FILTER (WHERE termination_reason IS NOT NULL), 0)::numeric, 6), "
        "count(*) FILTER (WHERE termination_reason = 'clean')::int, "
        "count(*) FILTER (WHERE termination_reason = 'error')::int, "
        "count(*) FILTER (WHERE termination_reason = 'max_steps_reached')::int, "
        "count(*) FILTER (WHERE termination_reason = 'context_limit')::int, "
        "count(*) FILTER (WHERE termination_reason = 'timeout')::int "
        "FROM agent_runs WHERE project_id = %s GROUP BY 1, 2 ORDER BY 1, 2",
        (uuid.UUID(project_id),),
    )


async def runs_of(api, project) -> dict:
    status, runs, _ = await api.get(
        f"/v1/projects/{project.name}/agent/runs", headers=project.auth()
    )
    assert status == 200
    return runs


def mapped(name: str) -> list[mapping.MappedRun]:
    spans = decode.from_json(json.dumps(document(name)).encode())
    runs = []
    for trace in sorted({span.trace_id for span in spans}):
        runs += mapping.map_trace([span for span in spans if span.trace_id == trace])
    return runs


@pytest.mark.parametrize("name", ALL)
async def test_each_frameworks_trace_is_stored_as_it_maps(api, db_url: str, name: str) -> None:
    """Every captured trace, in one export (protobuf for every other one): the runs,
    steps and model calls the mapping gives, and /loops finds what it finds."""
    project = make_project(db_url)
    as_protobuf = ALL.index(name) % 2 == 1
    status, body = await send(api, project.keys["ingest"], document(name), as_protobuf)
    assert status == 200, body
    expected = mapped(name)
    data = stored(db_url, project.id)
    by_id = {row[0]: row for row in data["runs"]}
    assert set(by_id) == {run.run_id for run in expected}
    for run in expected:
        row = by_id[run.run_id]
        assert row[1] == run.agent_name and row[2] == run.parent_run_id
        assert row[5] == run.termination_reason
        assert row[13] == len(run.steps) and row[14] == len(run.calls)
        assert row[15] == sum(call.input_tokens for call in run.calls)
        assert row[8] == run.loop_step_index and row[7] == (run.loop_step_index is not None)
        steps = [s for s in data["steps"] if s[0] == run.run_id]
        assert [(s[1], s[3], s[6]) for s in steps] == [
            (step.step_index, step.tool_name, step.fingerprint) for step in run.steps
        ]
    assert data["run_rollups"] == rollups_recomputed(db_url, project.id)
    assert assert_sketches_stored(db_url, project.id) == sum(len(r.steps) for r in expected)
    for run in expected:
        status, loops, _ = await api.get(
            f"/v1/projects/{project.name}/agent/runs/{run.run_id}/loops", headers=project.auth()
        )
        assert status == 200
        groups = {}
        for step in run.steps:
            if step.fingerprint is not None:
                groups.setdefault(step.fingerprint, []).append(step.step_index)
        assert sorted(group["step_indices"] for group in loops["data"]) == sorted(
            indices for indices in groups.values() if len(indices) > 1
        )


def assert_same_stored(db_url: str, expected_project: str, project: str) -> tuple[dict, dict]:
    """Both projects hold the same runs, steps, model calls and rollups (row order and
    ids of their own aside); what each holds."""
    expected, got = stored(db_url, expected_project), stored(db_url, project)
    for table in ("runs", "steps", "calls"):
        key = 0 if table != "steps" else slice(0, 2)
        assert sorted(got[table], key=lambda r: str(r[key])) == sorted(
            expected[table], key=lambda r: str(r[key])
        ), table
    assert got["run_rollups"] == expected["run_rollups"]
    assert got["tool_rollups"] == expected["tool_rollups"]
    return expected, got


SPLIT = ["pydanticai_loop", "pydanticai_nested", "openaiagents_handoff", "openaiagents_loop",
         "langgraph_nested", "langgraph_openllmetry_parallel", "smolagents_nested",
         "strands_latest_nested", "openaiagents_agent_as_tool", "langgraph_arg_shapes",
         "logfire_openaiagents_nested", "mlflow_langgraph_nested", "openlit_crewai_nested",
         "mastra_nested", "litellm_otel_genai_nested", "googleadk_transfer", "strands_swarm",
         "strands_latest_swarm", "googleadk_legacy_parallel"]  # fmt: skip


@pytest.mark.parametrize("elsewhere", [False, True], ids=["one process", "each elsewhere"])
@pytest.mark.parametrize("name", SPLIT)
async def test_split_reordered_and_retried_exports_store_what_one_export_does(
    api, db_url: str, name: str, elsewhere: bool
) -> None:
    """``elsewhere``: each export reaches a process that holds none of the trace (as
    with several workers or servers): it reads the spans back from the database."""
    whole, pieces = make_project(db_url), make_project(db_url)
    assert (await send(api, whole.keys["ingest"], document(name)))[0] == 200
    for number, export in enumerate(split(document(name), seed=len(name))):
        if elsewhere:
            projection._memos.clear()
        status, body = await send(api, pieces.keys["ingest"], export, number % 2 == 0)
        assert status == 200, body
    expected, got = assert_same_stored(db_url, whole.id, pieces.id)
    assert got["run_rollups"] == rollups_recomputed(db_url, pieces.id)
    assert assert_sketches_stored(db_url, pieces.id) == len(expected["steps"])


def long_run_document(steps: int) -> dict:
    """A run of ``steps`` model calls, each followed by its tool call (the tenth query
    from the end asked again at the end: a loop), under one agent span, as OTLP JSON."""

    def attributes(values: dict) -> list[dict]:
        return [{"key": key, "value": {"intValue": str(value)} if isinstance(value, int)
                 else {"stringValue": value}} for key, value in values.items()]  # fmt: skip

    trace, agent, base = "ab" * 16, f"{1:016x}", 1_800_000_000_000_000_000
    spans = [{"traceId": trace, "spanId": agent, "name": "invoke_agent researcher",
              "startTimeUnixNano": str(base), "endTimeUnixNano": str(base + 1000 * steps + 900),
              "attributes": attributes({"gen_ai.operation.name": "invoke_agent",
                                        "gen_ai.agent.name": "researcher"})}]  # fmt: skip
    for n in range(1, steps + 1):
        start = base + 1000 * n
        query = f"query {n}" if n < steps else f"query {steps - 10}"
        spans.append({"traceId": trace, "spanId": f"{10_000 + n:016x}", "parentSpanId": agent,
                      "name": "chat gpt-4o", "startTimeUnixNano": str(start),
                      "endTimeUnixNano": str(start + 300),
                      "attributes": attributes({"gen_ai.operation.name": "chat",
                                                "gen_ai.provider.name": "openai",
                                                "gen_ai.request.model": "gpt-4o",
                                                "gen_ai.usage.input_tokens": 1000 + n,
                                                "gen_ai.usage.output_tokens": 20})})  # fmt: skip
        spans.append({"traceId": trace, "spanId": f"{20_000 + n:016x}", "parentSpanId": agent,
                      "name": "execute_tool search", "startTimeUnixNano": str(start + 400),
                      "endTimeUnixNano": str(start + 800),
                      "attributes": attributes({"gen_ai.operation.name": "execute_tool",
                                                "gen_ai.tool.name": "search",
                                                "gen_ai.tool.call.arguments":
                                                    json.dumps({"q": query}),
                                                "gen_ai.tool.call.result":
                                                    json.dumps({"hits": n})})})  # fmt: skip
    return {"resourceSpans": [{"resource": {"attributes": attributes(
        {"service.name": "researcher"})}, "scopeSpans": [{"scope": {"name": "bench"},
                                                           "spans": spans}]}]}  # fmt: skip


async def test_a_long_run_sent_a_few_spans_at_a_time_stores_what_one_export_does(
    api, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run still going sends its spans export after export; each export's spans are
    added to what the trace mapped to before (appends.py), instead of mapping every
    span of it again, and what is stored is what one export of the whole run stores."""
    from keelwave.server.ingest.otlp import appends

    added = []
    real = appends.map_more
    monkeypatch.setattr(appends, "map_more", lambda *a: added.append(real(*a)) or added[-1])
    doc = long_run_document(120)
    whole, pieces = make_project(db_url), make_project(db_url)
    assert (await send(api, whole.keys["ingest"], doc))[0] == 200
    ended = sorted(spans_of(doc), key=lambda item: int(item[2]["endTimeUnixNano"]))
    for number, start in enumerate(range(0, len(ended), 3)):
        export = export_of(doc, ended[start : start + 3])
        for _ in range(2 if number % 10 == 0 else 1):  # (some sent again)
            status, body = await send(api, pieces.keys["ingest"], export, number % 2 == 0)
            assert status == 200, body
    expected, _ = assert_same_stored(db_url, whole.id, pieces.id)
    assert len(expected["steps"]) == 120
    assert sum(runs is not None for runs in added) >= len(ended) // 3 - 3
    [(loop_step,)] = query(
        db_url, "SELECT loop_step_index FROM agent_runs WHERE project_id = %s", (pieces.id,)
    )
    assert loop_step == 110


@trigger_probe
async def test_spans_of_an_export_the_database_refused_are_forgotten(
    api, project, db_url: str
) -> None:
    """An export refused after its trace was mapped leaves nothing behind in the server's
    memory: the next export of the trace sees what the database has (here also a span
    another server stored meanwhile), not the refused span it had mapped."""
    from keelwave.server.ingest.otlp import stored as stored_form

    doc = long_run_document(6)
    ended = sorted(spans_of(doc), key=lambda item: int(item[2]["endTimeUnixNano"]))
    tools = [item for item in ended if item[2]["name"].startswith("execute_tool")]
    chats = [item for item in ended if item[2]["name"].startswith("chat")]
    first = [chats[0], tools[0], chats[1], tools[1]]
    assert (await send(api, project.keys["ingest"], export_of(doc, first)))[0] == 200

    refused = copy.deepcopy(tools[2])
    refused[2]["spanId"] = f"{99_999:016x}"
    for attribute in refused[2]["attributes"]:
        if attribute["key"] == "gen_ai.tool.call.arguments":
            attribute["value"] = {"stringValue": json.dumps({"q": "refuse me"})}
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION kw_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF NEW.tool_input::text LIKE '%refuse me%' THEN RAISE EXCEPTION 'refused' "
            "USING ERRCODE = 'data_exception'; END IF; RETURN NEW; END $$"
        )
        conn.execute(
            "CREATE TRIGGER kw_test_refuse BEFORE INSERT ON agent_steps FOR EACH ROW "
            "EXECUTE FUNCTION kw_test_refuse()"
        )
    status, _ = await send(api, project.keys["ingest"], export_of(doc, [refused]))
    assert status == 400
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("DROP TRIGGER kw_test_refuse ON agent_steps")

    # Another server stores the third tool call meanwhile.
    [elsewhere] = decode.from_json(json.dumps(export_of(doc, [tools[2]])).encode())
    query(
        db_url,
        "INSERT INTO otlp_spans (project_id, trace_id, span_id, span) "
        "VALUES (%s, %s, %s, %s) RETURNING 1",
        (
            uuid.UUID(project.id),
            elsewhere.trace_id,
            elsewhere.span_id,
            stored_form.encode(elsewhere),
        ),
    )
    last = [chats[3], tools[3]]
    assert (await send(api, project.keys["ingest"], export_of(doc, last)))[0] == 200

    whole = make_project(db_url)
    everything = export_of(doc, [*first, tools[2], *last])
    assert (await send(api, whole.keys["ingest"], everything))[0] == 200
    expected, got = assert_same_stored(db_url, whole.id, project.id)
    assert len(got["steps"]) == 4


BOUNDED = ["langgraph_nested", "mastra_nested", "openaiagents_loop", "smolagents_nested"]


async def test_the_traces_kept_in_memory_are_bounded_by_their_spans(
    api, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A few very long runs must not hold a server's memory: past MEMO_SPANS spans the
    least recently used traces are dropped from the memo, and the next export of one
    reads its spans back, with the same result as if it had been kept."""
    monkeypatch.setattr(projection, "MEMO_SPANS", 20)
    whole, pieces = make_project(db_url), make_project(db_url)
    for name in BOUNDED:
        assert (await send(api, whole.keys["ingest"], document(name)))[0] == 200
    projection._memos.clear()
    queues = [split(document(name), seed=len(name)) for name in BOUNDED]
    largest = max(len(spans_of(document(name))) for name in BOUNDED)
    number = 0
    while any(queues):  # the traces' exports interleaved, as from a fleet
        for queue in (queue for queue in queues if queue):
            status, body = await send(api, pieces.keys["ingest"], queue.pop(0), number % 2 == 0)
            assert status == 200, body
            number += 1
            held = [len(memo.spans) for memo in projection._memos.values()]
            assert sum(held) <= 20 or (len(held) == 1 and held[0] <= largest), held
    assert number > 2 * len(BOUNDED)
    assert_same_stored(db_url, whole.id, pieces.id)


async def test_exports_waiting_for_a_slow_database_are_bounded(
    api, project, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While otlp_spans is locked (a database that does not keep up), the exports that
    wait for it are bounded: the next one is told 429 with Retry-After, which
    OpenTelemetry's exporters retry, instead of piling up in memory. Once the lock goes,
    the waiting exports commit, each once."""
    monkeypatch.setattr(otlp_export, "MAX_WAITING_EXPORTS", 2)
    names = ["pydanticai_loop", "openaiagents_loop", "smolagents_nested"]
    blocker = await psycopg.AsyncConnection.connect(db_url)
    try:
        await blocker.execute("LOCK TABLE otlp_spans IN ACCESS EXCLUSIVE MODE")
        waiting = [
            asyncio.create_task(send(api, project.keys["ingest"], document(name)))
            for name in names[:2]
        ]
        await asyncio.sleep(1.0)  # both are inside their transactions, held by the lock
        async with api.session.post(
            api.url + "/v1/traces",
            data=json.dumps(document(names[2])).encode(),
            headers=headers(project.keys["ingest"]),
        ) as response:
            assert response.status == 429
            assert int(response.headers["Retry-After"]) >= 1
            assert "too many exports" in (await response.json())["message"]  # google.rpc.Status
        assert not any(task.done() for task in waiting)
    finally:
        await blocker.rollback()
        await blocker.close()
    assert [status for status, _ in await asyncio.gather(*waiting)] == [200, 200]
    assert (await send(api, project.keys["ingest"], document(names[2])))[0] == 200  # retried
    [(spans,)] = query(
        db_url, "SELECT count(*) FROM otlp_spans WHERE project_id = %s", (uuid.UUID(project.id),)
    )
    assert spans == sum(len(spans_of(document(name))) for name in names)


async def test_a_retried_export_is_accepted_and_stores_nothing_twice(api, project, db_url) -> None:
    doc = document("openaiagents_loop")
    for _ in range(3):
        status, body = await send(api, project.keys["ingest"], doc, as_protobuf=True)
        assert status == 200
        answer = ExportTraceServiceResponse.FromString(body)
        assert not answer.HasField("partial_success")  # a retry is not a rejection
    data = stored(db_url, project.id)
    assert len(data["runs"]) == 1 and len(data["steps"]) == 3
    [(spans,)] = query(
        db_url, "SELECT count(*) FROM otlp_spans WHERE project_id = %s", (uuid.UUID(project.id),)
    )
    assert spans == len(spans_of(doc))
    assert data["run_rollups"][0][2] == 1  # one run in the rollups, not three


async def test_spans_another_server_stored_meanwhile_are_not_stored_twice(
    api, project, db_url, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spans are COPYed straight into otlp_spans once it is read which of them are
    stored, under the trace's lock. Servers on different Citus nodes do not share those
    locks: another may have stored some of the spans after that read. The COPY then
    fails on the primary key, and the export goes again the staged way."""
    doc = document("openaiagents_loop")
    spans = sorted(spans_of(doc), key=lambda item: int(item[2]["endTimeUnixNano"]))
    half = len(spans) // 2
    assert (await send(api, project.keys["ingest"], export_of(doc, spans[:half])))[0] == 200
    copy_new_spans = traces._copy_new_spans

    async def read_before_the_other_server_committed(cur, project_id, sent, stored):
        return await copy_new_spans(cur, project_id, sent, set())

    monkeypatch.setattr(traces, "_copy_new_spans", read_before_the_other_server_committed)
    status, body = await send(api, project.keys["ingest"], doc, as_protobuf=True)
    assert status == 200, body
    assert not ExportTraceServiceResponse.FromString(body).HasField("partial_success")
    monkeypatch.undo()
    [(count,)] = query(
        db_url, "SELECT count(*) FROM otlp_spans WHERE project_id = %s", (uuid.UUID(project.id),)
    )
    assert count == len(spans)
    whole = make_project(db_url)
    assert (await send(api, whole.keys["ingest"], doc))[0] == 200
    expected, got = stored(db_url, whole.id), stored(db_url, project.id)
    assert [r[1:] for r in got["runs"]] == [r[1:] for r in expected["runs"]]
    assert [r[1:] for r in got["steps"]] == [r[1:] for r in expected["steps"]]
    assert got["run_rollups"] == expected["run_rollups"]


async def test_tool_calls_without_their_arguments_are_no_loop(api, project, db_url) -> None:
    """Google ADK (and other frameworks with content capture off) records a tool span's
    name but not its arguments. Three such calls are not three identical calls: their
    fingerprint is NULL, /loops leaves them out, and so does the server's verdict."""
    trace_id, agent_id = "5e" * 16, "a1" * 8
    start = 1_700_000_000_000_000_000

    def span(span_id: str, name: str, offset: int, attributes: dict, parent: str | None) -> dict:
        return {
            "traceId": trace_id,
            "spanId": span_id,
            **({"parentSpanId": parent} if parent else {}),
            "name": name,
            "kind": 1,
            "startTimeUnixNano": str(start + offset * 1_000_000),
            "endTimeUnixNano": str(start + offset * 1_000_000 + 500_000),
            "attributes": [
                {"key": key, "value": {"stringValue": value}} for key, value in attributes.items()
            ],
            "status": {},
        }

    tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather"}
    spans = [span(f"{i:016x}", "execute_tool get_weather", i, tool, agent_id) for i in (1, 2, 3)]
    agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather_agent"}
    spans.append({**span(agent_id, "invoke_agent weather_agent", 0, agent, None),
                  "endTimeUnixNano": str(start + 10_000_000)})  # fmt: skip
    doc = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {}, "spans": spans}]}]}
    assert (await send(api, project.keys["ingest"], doc))[0] == 200
    [run] = (await runs_of(api, project))["data"]
    assert run["step_count"] == 3
    for _ in range(100):
        [(judged,)] = query(
            db_url, "SELECT verdict_steps FROM agent_runs WHERE id = %s", (uuid.UUID(run["id"]),)
        )
        if judged == 3:
            break
        await asyncio.sleep(0.1)
    status, loops, _ = await api.get(
        f"/v1/projects/{project.name}/agent/runs/{run['id']}/loops", headers=project.auth()
    )
    assert (status, loops) == (200, {"data": []})
    [run] = (await runs_of(api, project))["data"]
    assert (run["loop_detected"], run["detected_loop"], run["findings"]) == (False, False, [])


async def test_tool_calls_arriving_before_their_agent_make_a_running_run_it_then_finishes(
    api, project, db_url
) -> None:
    """What an exporter sends first is the tool spans: the run is there at once (so
    it can be watched, and stall), and its agent span finishes it in place."""
    doc = document("pydanticai_loop")
    spans = sorted(spans_of(doc), key=lambda item: int(item[2]["endTimeUnixNano"]))
    agent = [item for item in spans if not item[2].get("parentSpanId")]
    early = [item for item in spans if item not in agent]
    assert (await send(api, project.keys["ingest"], export_of(doc, early)))[0] == 200
    runs = await runs_of(api, project)
    [running] = runs["data"]
    assert running["status"] == "running" and running["step_count"] == 3
    assert running["loop_detected"] and running["loop_step_index"] == 1
    assert (await send(api, project.keys["ingest"], export_of(doc, agent)))[0] == 200
    runs = await runs_of(api, project)
    [finished] = runs["data"]
    assert finished["id"] == running["id"] and finished["status"] == "finished"
    assert finished["agent_name"] == "weather_agent" and finished["termination_reason"] == "clean"
    assert stored(db_url, project.id)["run_rollups"] == rollups_recomputed(db_url, project.id)


def _genai_span(span_id: str, parent: str | None, name: str, attributes: dict) -> dict:
    began = (time.time_ns() // 60_000_000_000 - 10) * 60_000_000_000  # (the same for all)
    return {
        "traceId": "ab" * 16, "spanId": span_id * 16, "name": name, "kind": 1,
        **({"parentSpanId": parent * 16} if parent else {}),
        "startTimeUnixNano": str(began + int(span_id) * 1_000_000),
        "endTimeUnixNano": str(began + (10 - int(span_id)) * 1_000_000_000),
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()],
    }  # fmt: skip


async def test_a_child_run_whose_parent_has_not_arrived_gets_it_when_it_does(api, project) -> None:
    """An agent whose only work is another agent: its span comes last. Until then the
    inner run has no parent (not one that does not exist); then it is its child."""
    outer = _genai_span(
        "1",
        None,
        "invoke_agent outer",
        {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "outer"},
    )
    inner = _genai_span(
        "2",
        "1",
        "invoke_agent inner",
        {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "inner"},
    )
    tool = _genai_span("3", "2", "execute_tool t", {"gen_ai.operation.name": "execute_tool",
                       "gen_ai.tool.name": "t", "gen_ai.tool.call.arguments": "{}"})  # fmt: skip

    def export(*spans: dict) -> dict:
        return {"resourceSpans": [{"scopeSpans": [{"spans": list(spans)}]}]}

    async def parents() -> dict[str, str | None]:
        runs = (await runs_of(api, project))["data"]
        names = {run["id"]: run["agent_name"] for run in runs}
        return {run["agent_name"]: names.get(run["parent_run_id"]) for run in runs}

    assert (await send(api, project.keys["ingest"], export(tool, inner)))[0] == 200
    assert await parents() == {"inner": None}
    status, detail, _ = await api.get(
        f"/v1/projects/{project.name}/agent/runs?root=true", headers=project.auth()
    )
    assert [run["agent_name"] for run in detail["data"]] == ["inner"]
    assert (await send(api, project.keys["ingest"], export(outer)))[0] == 200
    assert await parents() == {"inner": "outer", "outer": None}


async def test_a_run_whose_agent_span_has_not_arrived_is_from_spans_and_still_going(
    api, project
) -> None:
    """A run made of tool and model spans alone, its agent span missing (OpenLLMetry's
    LlamaIndex never sends it when the run raises): the API says it comes from spans and
    has no duration yet (not 0); its agent span then gives it one."""
    doc = document("pydanticai_loop")
    spans = spans_of(doc)
    agent = [item for item in spans if not item[2].get("parentSpanId")]
    early = [item for item in spans if item not in agent]
    assert (await send(api, project.keys["ingest"], export_of(doc, early)))[0] == 200
    [listed] = (await runs_of(api, project))["data"]
    path = f"/v1/projects/{project.name}/agent/runs/{listed['id']}"
    status, body, _ = await api.get(path, headers=project.auth())
    assert status == 200
    run = body["data"]
    assert run["from_spans"] is True and run["status"] == "running"
    assert (run["duration_ms"], run["ended_at"], listed["duration_ms"]) == (None, None, None)
    assert run["metadata"]["otel.trace_id"] == agent[0][2]["traceId"]
    assert (await send(api, project.keys["ingest"], export_of(doc, agent)))[0] == 200
    status, body, _ = await api.get(path, headers=project.auth())
    assert body["data"]["from_spans"] is True and body["data"]["duration_ms"] > 0


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_compressed_exports(api, project, encoding: str) -> None:
    raw = to_protobuf(document("strands_loop"))
    body = gzip.compress(raw) if encoding == "gzip" else zlib.compress(raw)
    async with api.session.post(
        api.url + "/v1/traces",
        data=body,
        headers=headers(project.keys["ingest"], PROTOBUF, **{"Content-Encoding": encoding}),
    ) as response:
        assert response.status == 200
        assert response.content_type == PROTOBUF
    runs = await runs_of(api, project)
    assert [run["agent_name"] for run in runs["data"]] == ["weather_agent"]


async def failure(api, body: bytes, head: dict[str, str]) -> tuple[int, dict, dict]:
    """POST and decode the google.rpc.Status an OTLP failure carries."""
    async with api.session.post(api.url + "/v1/traces", data=body, headers=head) as response:
        raw = await response.read()
        if response.content_type == PROTOBUF:
            message = status_pb2.Status.FromString(raw)
            detail = {"code": message.code, "message": message.message}
        else:
            detail = json.loads(raw)
        return response.status, detail, dict(response.headers)


async def test_failures_answer_as_otlp_says(api, project) -> None:
    key = project.keys["ingest"]
    # 64 MiB of zeros gzip to about 64 KiB: the limit counts what they unpack to.
    bomb = gzip.compress(b"\x00" * (64 * LIMIT))
    status, detail, _ = await failure(
        api, bomb, headers(key, PROTOBUF, **{"Content-Encoding": "gzip"})
    )
    assert status == 413 and "too large" in detail["message"]
    status, detail, _ = await failure(api, b"\xff\xff\xff", headers(key, PROTOBUF))
    assert status == 400 and detail["code"] == 3 and "protobuf" in detail["message"]
    status, detail, _ = await failure(api, b'{"resourceSpans": 7}', headers(key))
    assert status == 400 and "resourceSpans" in detail["message"]
    status, detail, _ = await failure(api, b"{}", headers(key, "text/plain"))
    assert status == 415 and "application/x-protobuf" in detail["message"]
    status, detail, _ = await failure(api, b"{}", {"Content-Type": "application/json"})
    assert status == 401 and detail["code"] == 16
    status, detail, _ = await failure(api, b"{}", headers(project.keys["read"]))
    assert status == 403 and detail["code"] == 7
    # a body that says it is gzip and is not: the exporter must not retry it
    plain = to_protobuf(document("strands_loop"))
    for encoding in ("gzip", "deflate"):
        status, detail, _ = await failure(
            api, plain, headers(key, PROTOBUF, **{"Content-Encoding": encoding})
        )
        assert status == 400 and detail["code"] == 3, detail
        assert encoding in detail["message"]
    # an encoding aiohttp does not undo would reach the decoder still encoded
    status, detail, _ = await failure(
        api, plain, headers(key, PROTOBUF, **{"Content-Encoding": "compress"})
    )
    assert status == 415 and "compress" in detail["message"], detail


async def test_a_json_attribute_without_its_key_is_read_as_protobuf_reads_it(api, project) -> None:
    doc = document("pydanticai_loop")
    keyless = json.loads(json.dumps(doc))
    resource = keyless["resourceSpans"][0]
    resource["resource"]["attributes"].append({"value": {"stringValue": "r"}})
    for span in resource["scopeSpans"][0]["spans"]:
        span["attributes"].append({"value": {"kvlistValue": {"values": [{"value": {}}]}}})
    status, body = await send(api, project.keys["ingest"], keyless)
    assert (status, json.loads(body)) == (200, {})
    runs = await runs_of(api, project)
    assert [run["agent_name"] for run in runs["data"]] == ["weather_agent"]


async def test_spans_that_cannot_be_stored_are_reported_and_the_rest_kept(api, project) -> None:
    doc = document("pydanticai_loop")
    bad = json.loads(json.dumps(doc))
    bad["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = "0" * 32
    status, body = await send(api, project.keys["ingest"], bad)
    assert status == 200
    answer = json.loads(body)
    assert answer["partialSuccess"]["rejectedSpans"] == "1"
    assert "traceId" in answer["partialSuccess"]["errorMessage"]
    runs = await runs_of(api, project)
    assert len(runs["data"]) == 1


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("spanId", "abcd"),  # hex, too short
        ("traceId", "abcd" * 4),  # 8 bytes, not 16
        ("parentSpanId", "0102"),
        ("spanId", "not an id at all"),  # neither hex nor base64
        ("spanId", 12345),
    ],
)
async def test_json_spans_with_ids_of_the_wrong_size_are_rejected_alone(
    api, project, field: str, value
) -> None:
    doc = json.loads(json.dumps(document("pydanticai_loop")))
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    bad = json.loads(json.dumps(spans[0]))
    bad[field] = value
    spans.append(bad)
    status, body = await send(api, project.keys["ingest"], doc)
    assert status == 200
    answer = json.loads(body)
    assert answer["partialSuccess"]["rejectedSpans"] == "1"
    assert field in answer["partialSuccess"]["errorMessage"]
    runs = await runs_of(api, project)
    assert [run["agent_name"] for run in runs["data"]] == ["weather_agent"]


async def test_a_nul_character_in_a_spans_attribute_leaves_its_run_readable(api, project) -> None:
    doc = json.loads(json.dumps(document("pydanticai_loop")))
    resource = doc["resourceSpans"][0]
    resource["resource"]["attributes"].append(
        {"key": "user.note", "value": {"stringValue": "a\u0000b"}}
    )
    for span in resource["scopeSpans"][0]["spans"]:
        span["attributes"].append({"key": "k\u0000", "value": {"stringValue": "\u0000"}})
    status, _ = await send(api, project.keys["ingest"], doc)
    assert status == 200
    runs = await runs_of(api, project)
    (run,) = runs["data"]
    assert run["from_spans"] is True
    status, detail, _ = await api.get(
        f"/v1/projects/{project.name}/agent/runs/{run['id']}", headers=project.auth()
    )
    assert status == 200, detail
    assert "\\u0000" not in json.dumps(detail["data"].get("metadata"))  # (as U+FFFD)


@pytest.mark.parametrize("as_protobuf", [False, True], ids=["json", "protobuf"])
async def test_text_that_is_not_unicode_is_kept_as_the_collector_keeps_it(
    api, project, db_url: str, as_protobuf: bool
) -> None:
    """Half a surrogate pair (a JavaScript string cut in UTF-16 units: protobuf.js writes
    bytes that are not UTF-8, JSON.stringify an escape like \\ud83d) in one span's result
    and in the resource: protobuf refuses the export as it is, and an exporter drops an
    export answered 400, every span with it. Each bad sequence becomes U+FFFD instead."""
    doc = json.loads(json.dumps(document("pydanticai_loop")))
    resource = doc["resourceSpans"][0]
    cut = "@#@" if as_protobuf else "\ud83d"  # (3 bytes, as the bad ones; an escape in JSON)
    resource["resource"]["attributes"].append({"key": "user.note", "value": {"stringValue": cut}})
    spans = resource["scopeSpans"][0]["spans"]
    tool = next(span for span in spans if "execute_tool" in span["name"])
    for attribute in tool["attributes"]:
        if attribute["key"] == "gen_ai.tool.call.result":
            attribute["value"]["stringValue"] = f"sunny {cut}"
    if as_protobuf:
        body = to_protobuf(doc).replace(b"@#@", b"\xed\xa0\xbd")
        media = PROTOBUF
    else:
        body = json.dumps(doc).encode()
        assert b"\\ud83d" in body
        media = "application/json"
    async with api.session.post(
        api.url + "/v1/traces", data=body, headers=headers(project.keys["ingest"], media)
    ) as response:
        assert response.status == 200, await response.read()
        answer = await response.read()
    assert answer in (b"", b"{}")  # nothing rejected
    runs = await runs_of(api, project)
    (run,) = runs["data"]
    assert run["step_count"] == 3 and run["loop_detected"]
    ids = (project.id, run["id"])  # (a run's id is its trace's and span's: other projects')
    outputs = query(
        db_url,
        "SELECT tool_output::text FROM agent_steps WHERE project_id = %s AND run_id = %s",
        ids,
    )
    assert sum("sunny \ufffd" in json.loads(output) for (output,) in outputs) == 1
    ((metadata,),) = query(
        db_url, "SELECT metadata::text FROM agent_runs WHERE project_id = %s AND id = %s", ids
    )
    assert "\ufffd" in json.loads(metadata)["user.note"]


async def test_an_empty_export_is_fine(api, project) -> None:
    status, body = await send(api, project.keys["ingest"], {"resourceSpans": []})
    assert (status, json.loads(body)) == (200, {})


async def test_a_run_timed_out_before_its_agent_span_came_is_finished_by_it(
    db_url: str, aiohttp_server
) -> None:
    """The agent span is late (an exporter stuck, a long pause): the run its tool calls
    made stalls and times out like any other; when the span comes, it says how the
    run really ended, and the rollups move with it."""
    settings = make_settings(max_body_bytes=LIMIT, stall_after_seconds=1, timeout_after_seconds=1)
    server = await aiohttp_server(create_app(settings, db_url))
    project = make_project(db_url)
    doc = document("openaiagents_loop")
    spans = sorted(spans_of(doc), key=lambda item: int(item[2]["endTimeUnixNano"]))
    async with aiohttp.ClientSession() as session:
        api = Api(str(server.make_url("")).rstrip("/"), session)
        assert (await send(api, project.keys["ingest"], export_of(doc, spans[:-3])))[0] == 200
        for _ in range(100):
            [run] = (await runs_of(api, project))["data"]
            if run["termination_reason"] == "timeout":
                break
            await asyncio.sleep(0.1)
        assert run["termination_reason"] == "timeout"
        assert stored(db_url, project.id)["run_rollups"] == rollups_recomputed(db_url, project.id)
        assert (await send(api, project.keys["ingest"], export_of(doc, spans[-3:])))[0] == 200
        [finished] = (await runs_of(api, project))["data"]
    assert finished["id"] == run["id"] and finished["termination_reason"] == "clean"
    rollups = stored(db_url, project.id)["run_rollups"]
    assert rollups == rollups_recomputed(db_url, project.id)
    assert [(row[12], row[16]) for row in rollups] == [(1, 0)]  # clean 1, timeout 0


def _as_trace(doc: dict, number: int, city: str = "Paris") -> dict:
    """The export with its trace id made ``number``'s own (and the city asked about)."""
    text = json.dumps(doc).replace("Paris", city)
    for _, _, span in spans_of(doc):
        text = text.replace(span["traceId"], f"{number:032x}")
    return json.loads(text)


async def _while_the_writes_wait(
    api, key: str, project_id: uuid.UUID, conn: psycopg.Connection, first: dict, others: list
) -> list[tuple[int, bytes]]:
    """Send ``first`` twice while its trace's lock is held elsewhere (as a long
    transaction of another server would hold it): both exports wait for it, and so take
    the writes the project may have under way at once. Then send ``others``, which wait
    in the server's queue, and let the lock go. The answers, first's two first."""
    [trace] = {span["traceId"] for _, _, span in spans_of(first)}
    lock = (traces.TRACE_LOCKS, traces.trace_lock_key(project_id, bytes.fromhex(trace)))
    conn.execute("SELECT pg_advisory_lock(%s, %s)", lock)
    held = [asyncio.create_task(send(api, key, first)) for _ in range(2)]
    for _ in range(200):
        [(waiting,)] = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        ).fetchall()
        if waiting:
            break
        await asyncio.sleep(0.05)
    queued = [asyncio.create_task(send(api, key, other)) for other in others]
    await asyncio.sleep(1)  # (they reach the server and wait: both writes are taken)
    conn.execute("SELECT pg_advisory_unlock(%s, %s)", lock)
    return await asyncio.gather(*held, *queued)


@trigger_probe
async def test_exports_that_wait_are_committed_together_and_a_refused_one_alone(
    api, project, db_url
) -> None:
    """Exports of one project that arrive while its transactions are under way are
    written together by the next one (group commit); each is answered after the commit
    that holds it. One the database refuses is refused alone: its group is written
    again export by export, and the others are stored once."""
    key, project_id = project.keys["ingest"], uuid.UUID(project.id)
    doc = document("openaiagents_loop")
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE kw_test_commits (tx bigint)")
        conn.execute(
            "CREATE FUNCTION kw_test_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "INSERT INTO kw_test_commits VALUES (txid_current()); RETURN NULL; END $$"
        )
        conn.execute(
            "CREATE TRIGGER kw_test_commit AFTER INSERT ON otlp_spans "
            "FOR EACH STATEMENT EXECUTE FUNCTION kw_test_commit()"
        )
        answers = await _while_the_writes_wait(
            api, key, project_id, conn, _as_trace(doc, 1), [_as_trace(doc, n) for n in range(2, 12)]
        )
        assert [status for status, _ in answers] == [200] * 12
        # The first export's transaction (its twin finds its spans stored: nothing to
        # commit), then one for the ten that waited.
        [(transactions,)] = conn.execute("SELECT count(DISTINCT tx) FROM kw_test_commits")
        assert transactions == 2

        # A real refusal by the database: a data exception raised for one city's steps.
        conn.execute(
            "CREATE FUNCTION kw_test_poison() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "RAISE EXCEPTION 'poisoned input' USING ERRCODE = '22023'; END $$"
        )
        conn.execute(
            "CREATE TRIGGER kw_test_poison BEFORE INSERT ON agent_steps FOR EACH ROW "
            "WHEN (NEW.tool_input::text LIKE '%Poison%') EXECUTE FUNCTION kw_test_poison()"
        )
        others = [_as_trace(doc, n, "Poison" if n == 17 else "Paris") for n in range(13, 23)]
        answers = await _while_the_writes_wait(
            api, key, project_id, conn, _as_trace(doc, 12), others
        )
    statuses = [status for status, _ in answers]
    poisoned = 2 + 4  # (trace 17, the fifth of those that waited)
    assert statuses[poisoned] == 400 and b"poisoned input" in answers[poisoned][1]
    assert statuses[:poisoned] + statuses[poisoned + 1 :] == [200] * 11
    data = stored(db_url, project.id)
    assert len(data["runs"]) == 21 and len(data["steps"]) == 3 * 21  # each once; not 17
    [(spans,)] = query(
        db_url, "SELECT count(*) FROM otlp_spans WHERE project_id = %s", (project_id,)
    )
    assert spans == 21 * len(spans_of(doc))


async def test_an_export_larger_than_the_ingest_body_limit_is_taken_up_to_its_own(
    db_url: str, project, aiohttp_server
) -> None:
    """An instrumentation that records each call's whole conversation (LangGraph's)
    sends 512-span batches of tens of MB, and an exporter drops a batch answered 413:
    OTLP has a limit of its own, above native ingest's."""
    settings = make_settings(max_body_bytes=LIMIT, otlp_max_body_bytes=8 * LIMIT)
    server = await aiohttp_server(create_app(settings, db_url))
    doc = long_run_document(40)
    for span in doc["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        span["attributes"].append(
            {"key": "gen_ai.input.messages", "value": {"stringValue": "x" * 60_000}}
        )
    body = to_protobuf(doc)
    assert LIMIT < len(body) < 8 * LIMIT
    async with aiohttp.ClientSession() as session:
        api = Api(str(server.make_url("")).rstrip("/"), session)
        key = project.keys["ingest"]
        status, detail, _ = await failure(api, body, headers(key, PROTOBUF))
        assert status == 200, detail
        runs = await runs_of(api, project)
        assert [run["step_count"] for run in runs["data"]] == [40]
        # native ingest keeps its own limit
        async with session.post(
            api.url + "/v1/ingest/agent/steps", data=b" " * (2 * LIMIT), headers=headers(key)
        ) as response:
            assert response.status == 413
        # and OTLP's is a limit still
        status, detail, _ = await failure(api, b"\x00" * (9 * LIMIT), headers(key, PROTOBUF))
        assert status == 413 and "too large" in detail["message"]
