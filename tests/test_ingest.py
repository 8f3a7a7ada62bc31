"""Ingest: runs, steps, model calls; fingerprints over the exact bytes; retries."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import uuid

import pytest
from conftest import Api, Project, query


def expected_fingerprint(tool_name: str, raw_input: bytes) -> bytes:
    return hashlib.sha256(tool_name.encode() + b"\x00" + raw_input).digest()


async def start_run(api: Api, project: Project, **fields) -> str:
    status, body, _ = await api.post(
        "/v1/ingest/agent/runs",
        json={"agent_name": "research-agent", **fields},
        headers=project.auth("ingest"),
    )
    assert status == 201, body
    return body["data"]["id"]


async def post_raw_steps(api: Api, project: Project, raw: bytes) -> tuple[int, dict]:
    status, body, _ = await api.post(
        "/v1/ingest/agent/steps",
        data=raw,
        headers={**project.auth("ingest"), "Content-Type": "application/json"},
    )
    return status, body


async def test_run_lifecycle_is_stored(api: Api, project: Project, db_url: str) -> None:
    run_id = await start_run(
        api, project, input={"question": "why?"}, metadata={"user": "u1"}, tags=["prod", "eu"]
    )
    status, body, _ = await api.post(
        f"/v1/ingest/agent/runs/{run_id}/finish",
        json={
            "termination_reason": "loop_detected",
            "loop_detected": True,
            "loop_step_index": 2,
            "output": "gave up",
        },
        headers=project.auth("ingest"),
    )
    assert status == 200, body
    [row] = query(
        db_url,
        "SELECT agent_name, termination_reason, loop_detected, loop_step_index, "
        "input::text, output::text, tags, ended_at IS NOT NULL FROM agent_runs "
        "WHERE project_id = %s AND id = %s",
        (project.id, run_id),
    )
    assert row == (
        "research-agent",
        "loop_detected",
        True,
        2,
        '{"question": "why?"}',
        '"gave up"',
        ["prod", "eu"],
        True,
    )


async def test_client_chosen_run_id_and_retry_store_one_run(
    api: Api, project: Project, db_url: str
) -> None:
    run_id = str(uuid.uuid4())
    assert await start_run(api, project, id=run_id) == run_id
    assert await start_run(api, project, id=run_id) == run_id  # a retry
    assert query(db_url, "SELECT count(*) FROM agent_runs WHERE id = %s", (run_id,)) == [(1,)]


async def test_fingerprint_is_over_the_exact_bytes_sent(
    api: Api, project: Project, db_url: str
) -> None:
    run_id = await start_run(api, project)
    # Odd spacing, key order and non-ASCII: all of it must count, byte for byte.
    raw_input = (
        b'{"q" :  "caf\xc3\xa9 \\u00e9",\n "max_results":3,  "nested": {"b": [1, 2.50], "a": null}}'
    )
    body = b'{"run_id": "%s", "step_index": 1, "tool_name": "web_search", "tool_input": %s}' % (
        run_id.encode(),
        raw_input,
    )
    status, response = await post_raw_steps(api, project, body)
    assert status == 200, response
    [(fingerprint, stored_input)] = query(
        db_url,
        "SELECT input_fingerprint, tool_input::text FROM agent_steps WHERE run_id = %s",
        (run_id,),
    )
    assert fingerprint == expected_fingerprint("web_search", raw_input)
    assert stored_input.encode() == raw_input  # json keeps the text as sent


async def test_fingerprints_of_array_elements(api: Api, project: Project, db_url: str) -> None:
    run_id = await start_run(api, project)
    inputs = [
        b'{"a":1,"b":2}',
        b'{"b":2,"a":1}',
        b'{"a": 1, "b": 2}',
        b"[1,2]",
        b'"text"',
        b"null",
        b"42",
    ]
    elements = b",".join(
        b'{"run_id":"%s","step_index":%d,"tool_name":"t","tool_input":%s}'
        % (run_id.encode(), index, raw)
        for index, raw in enumerate(inputs, start=1)
    )
    status, response = await post_raw_steps(api, project, b"[ " + elements + b" ]")
    assert status == 200 and response == {"data": {"accepted": len(inputs)}}
    rows = query(
        db_url,
        "SELECT step_index, input_fingerprint FROM agent_steps "
        "WHERE run_id = %s ORDER BY step_index",
        (run_id,),
    )
    assert [fp for _, fp in rows] == [expected_fingerprint("t", raw) for raw in inputs]
    assert len({fp for _, fp in rows}) == len(inputs)  # key order and spacing matter


async def test_steps_without_tool_have_no_fingerprint(
    api: Api, project: Project, db_url: str
) -> None:
    run_id = await start_run(api, project)
    steps = [
        {"run_id": run_id, "step_index": 1, "step_type": "think", "content": "plan"},
        {"run_id": run_id, "step_index": 2, "step_type": "replan", "content": "plan"},
        {"run_id": run_id, "step_index": 3, "tool_name": "search"},  # no input at all
    ]
    status, body, _ = await api.post(
        "/v1/ingest/agent/steps", json=steps, headers=project.auth("ingest")
    )
    assert status == 200, body
    rows = query(
        db_url,
        "SELECT step_index, step_type, input_fingerprint FROM agent_steps "
        "WHERE run_id = %s ORDER BY step_index",
        (run_id,),
    )
    assert rows == [
        (1, "think", None),
        (2, "replan", None),
        (3, "tool_call", expected_fingerprint("search", b"")),
    ]


async def test_retried_steps_are_stored_once_and_fabricate_no_loop(
    api: Api, project: Project, db_url: str
) -> None:
    run_id = await start_run(api, project)
    steps = [
        {"run_id": run_id, "step_index": i, "tool_name": "fetch", "tool_input": {"page": i}}
        for i in (1, 2, 3)
    ]
    for _ in range(3):  # the same batch, retried twice
        status, body, _ = await api.post(
            "/v1/ingest/agent/steps", json=steps, headers=project.auth("ingest")
        )
        assert status == 200, body
    # and once more, concurrently
    await asyncio.gather(
        *[
            api.post("/v1/ingest/agent/steps", json=steps[0], headers=project.auth("ingest"))
            for _ in range(10)
        ]
    )
    assert query(db_url, "SELECT count(*) FROM agent_steps WHERE run_id = %s", (run_id,)) == [(3,)]
    status, body, _ = await api.get(
        f"/v1/projects/{project.id}/agent/runs/{run_id}/loops", headers=project.auth("read")
    )
    assert (status, body) == (200, {"data": []})


async def test_first_copy_of_a_step_wins(api: Api, project: Project, db_url: str) -> None:
    run_id = await start_run(api, project)
    for content in ("first", "second"):
        await api.post(
            "/v1/ingest/agent/steps",
            headers=project.auth("ingest"),
            json={"run_id": run_id, "step_index": 1, "step_type": "think", "content": content},
        )
    assert query(db_url, "SELECT content FROM agent_steps WHERE run_id = %s", (run_id,)) == [
        ("first",)
    ]


async def test_steps_may_arrive_before_their_run(api: Api, project: Project, db_url: str) -> None:
    run_id = str(uuid.uuid4())
    for index in (1, 2):
        status, _, _ = await api.post(
            "/v1/ingest/agent/steps",
            headers=project.auth("ingest"),
            json={"run_id": run_id, "step_index": index, "tool_name": "a", "tool_input": {}},
        )
        assert status == 200
    status, body, _ = await api.get(
        f"/v1/projects/{project.id}/agent/runs/{run_id}/loops", headers=project.auth("read")
    )
    assert status == 200 and body["data"][0]["step_indices"] == [1, 2]
    assert await start_run(api, project, id=run_id) == run_id
    status, _, _ = await api.post(
        f"/v1/ingest/agent/runs/{run_id}/finish",
        json={"termination_reason": "clean"},
        headers=project.auth("ingest"),
    )
    assert status == 200


async def test_concurrent_requests_are_all_committed(
    api: Api, project: Project, db_url: str
) -> None:
    """Group commit: many requests share flushes; every acknowledged row is there."""
    run_id = await start_run(api, project)

    async def send(index: int) -> int:
        status, _, _ = await api.post(
            "/v1/ingest/agent/steps",
            headers=project.auth("ingest"),
            json=[
                {
                    "run_id": run_id,
                    "step_index": index * 10 + k,
                    "tool_name": "x",
                    "tool_input": {"k": index * 10 + k},
                }
                for k in range(10)
            ],
        )
        return status

    statuses = await asyncio.gather(*[send(i) for i in range(100)])
    assert set(statuses) == {200}
    assert query(
        db_url,
        "SELECT count(*), count(DISTINCT input_fingerprint) FROM agent_steps WHERE run_id = %s",
        (run_id,),
    ) == [(1000, 1000)]


async def test_model_calls_are_stored_and_deduplicated_by_id(
    api: Api, project: Project, db_url: str
) -> None:
    run_id = await start_run(api, project)
    call_id = str(uuid.uuid4())
    call = {
        "id": call_id,
        "run_id": run_id,
        "step_index": 1,
        "provider": "openai",
        "model": "gpt-4o",
        "input_tokens": 1200,
        "output_tokens": 80,
        "cost_usd": 0.0042,
        "latency_ms": 812.5,
    }
    for _ in range(2):
        status, body, _ = await api.post(
            "/v1/ingest/ai", json=[call], headers=project.auth("ingest")
        )
        assert status == 200 and body["data"]["ids"] == [call_id]
    status, body, _ = await api.post(
        "/v1/ingest/ai",
        json={"provider": "anthropic", "model": "claude", "status": "error", "error": "overloaded"},
        headers=project.auth("ingest"),
    )
    assert status == 200
    rows = query(
        db_url,
        "SELECT provider, input_tokens, output_tokens, cost_usd, status "
        "FROM ai_traces WHERE project_id = %s ORDER BY provider",
        (project.id,),
    )
    assert rows == [("anthropic", 0, 0, None, "error"), ("openai", 1200, 80, 0.0042, "ok")]


async def test_loop_fingerprint_matches_spec_example(api: Api, project: Project) -> None:
    """The spec's looping agent: five identical web_search calls, steps 1 to 5."""
    run_id = await start_run(api, project, agent_name="looping-agent")
    raw = b'{"max_results": 3, "q": "What is keelwave?"}'
    for index in range(1, 6):
        await post_raw_steps(
            api,
            project,
            b'{"run_id":"%s","step_index":%d,"tool_name":'
            b'"web_search","tool_input":%s}' % (run_id.encode(), index, raw),
        )
    status, body, _ = await api.get(
        f"/v1/projects/{project.id}/agent/runs/{run_id}/loops", headers=project.auth("read")
    )
    assert status == 200
    assert body == {
        "data": [
            {
                "fingerprint": base64.b64encode(expected_fingerprint("web_search", raw)).decode(),
                "hits": 5,
                "step_indices": [1, 2, 3, 4, 5],
                "tool_name": "web_search",
            }
        ]
    }


async def test_runs_can_start_in_a_batch(api: Api, project: Project, db_url: str) -> None:
    ids = [str(uuid.uuid4()) for _ in range(3)]
    body = [{"id": run_id, "agent_name": f"agent-{n}"} for n, run_id in enumerate(ids)]
    body.append({"agent_name": "no-id"})
    status, answer, _ = await api.post(
        "/v1/ingest/agent/runs", json=body, headers=project.auth("ingest")
    )
    assert status == 201, answer
    assert answer["data"]["accepted"] == 4 and answer["data"]["ids"][:3] == ids
    status, answer, _ = await api.post(
        "/v1/ingest/agent/runs",
        json=body[:3],  # a retry
        headers=project.auth("ingest"),
    )
    assert status == 201
    assert query(
        db_url, "SELECT count(*) FROM agent_runs WHERE project_id = %s", (project.id,)
    ) == [(4,)]
    status, answer, _ = await api.post(
        "/v1/ingest/agent/runs",
        headers=project.auth("ingest"),
        json=[{"agent_name": "ok"}, {"agent_name": ""}],
    )
    assert (status, answer["error"]["field"]) == (422, "[1].agent_name")


async def test_runs_can_finish_in_a_batch(api: Api, project: Project, db_url: str) -> None:
    ids = [await start_run(api, project) for _ in range(3)]
    stranger = str(uuid.uuid4())
    body = [
        {"id": ids[0], "termination_reason": "clean"},
        {
            "id": ids[1],
            "termination_reason": "loop_detected",
            "loop_detected": True,
            "loop_step_index": 2,
        },
        {"id": stranger, "termination_reason": "error"},
    ]
    status, answer, _ = await api.post(
        "/v1/ingest/agent/runs/finish", json=body, headers=project.auth("ingest")
    )
    assert status == 200, answer
    assert answer["data"] == {"finished": 2, "unknown": [stranger]}
    rows = dict(
        query(
            db_url,
            "SELECT id::text, termination_reason FROM agent_runs WHERE project_id = %s",
            (project.id,),
        )
    )
    assert rows == {ids[0]: "clean", ids[1]: "loop_detected", ids[2]: None}

    # One run twice in a batch: applied in order, as two calls would be.
    body = [
        {"id": ids[2], "termination_reason": "error", "loop_detected": True, "error": "x"},
        {"id": ids[0], "termination_reason": "timeout"},
        {"id": ids[2], "termination_reason": "clean"},
    ]
    status, answer, _ = await api.post(
        "/v1/ingest/agent/runs/finish", json=body, headers=project.auth("ingest")
    )
    assert answer["data"] == {"finished": 3, "unknown": []}
    [(reason, loop, error)] = query(
        db_url,
        "SELECT termination_reason, loop_detected, error FROM agent_runs WHERE id = %s",
        (ids[2],),
    )
    assert (reason, loop, error) == ("clean", True, "x")  # what the last left unset stays
    [(finished, loops, clean, timeout, errors)] = query(
        db_url,
        "SELECT sum(finished_runs), sum(loop_runs), sum(term_clean), sum(term_timeout), "
        "sum(term_error) FROM agent_run_rollups WHERE project_id = %s",
        (project.id,),
    )
    assert (finished, loops, clean, timeout, errors) == (3, 2, 1, 1, 0)

    status, answer, _ = await api.post(
        "/v1/ingest/agent/runs/finish",
        headers=project.auth(),
        json=[{"id": ids[2], "termination_reason": "finished"}],
    )
    assert (status, answer["error"]["field"]) == (422, "[0].termination_reason")


@pytest.mark.parametrize(
    "path", ["/v1/ingest/agent/runs/{id}/finish", "/v1/ingest/agent/runs/finish"]
)
async def test_values_postgresql_refuses_are_a_422_not_a_500(
    api: Api, project: Project, path: str
) -> None:
    _, body, _ = await api.post(
        "/v1/ingest/agent/runs", json={"agent_name": "odd"}, headers=project.auth()
    )
    run_id = body["data"]["id"]
    finish = {"id": run_id, "termination_reason": "clean", "loop_step_index": 7483686652}
    status, answer, _ = await api.post(
        path.format(id=run_id),
        json=finish if "{id}" in path else [finish],
        headers=project.auth(),
    )
    assert status == 422, answer
    assert "loop_step_index" in answer["error"]["message"]


async def test_offsets_postgresql_cannot_store_are_converted_to_utc(
    api: Api, project: Project
) -> None:
    """ISO 8601 allows offsets up to ±24 h; they are stored as the same instant in UTC."""
    _, body, _ = await api.post(
        "/v1/ingest/agent/runs",
        json={"agent_name": "far", "started_at": "2026-11-30T08:00:00+00:00"},
        headers=project.auth(),
    )
    run_id = body["data"]["id"]
    status, answer, _ = await api.post(
        f"/v1/ingest/agent/runs/{run_id}/finish",
        json={"termination_reason": "clean", "ended_at": "2026-11-30T08:00:00-20:40"},
        headers=project.auth(),
    )
    assert status == 200, answer
    _, run, _ = await api.get(f"/v1/projects/{project.id}/agent/runs/{run_id}",
                              headers=project.auth("read"))  # fmt: skip
    assert run["data"]["ended_at"] == "2026-12-01T04:40:00Z"  # RFC 3339, in UTC
    assert run["data"]["duration_ms"] == 20 * 3600_000 + 40 * 60_000


async def test_metadata_holding_a_nul_character_leaves_the_run_readable(
    api: Api, project: Project
) -> None:
    # JSON may carry "\u0000" and a json column keeps it; what reads a key of it must
    # not fail on it (PostgreSQL cannot hold NUL in text), nor may every page listing
    # the run.
    _, body, _ = await api.post(
        "/v1/ingest/agent/runs",
        json={"agent_name": "nul", "metadata": {"note": "a\u0000b", "k\u0000": 1}},
        headers=project.auth(),
    )
    run_id = body["data"]["id"]
    base = f"/v1/projects/{project.name}/agent/runs"
    for path in (base, f"{base}/{run_id}", f"{base}?metadata=note=x", f"{base}/{run_id}/timeline"):
        status, answer, _ = await api.get(path, headers=project.auth())
        assert status == 200, (path, answer)
    _, listed, _ = await api.get(base, headers=project.auth())
    assert [run["id"] for run in listed["data"]] == [run_id]
    assert listed["data"][0]["from_spans"] is False


async def test_a_body_that_is_not_the_gzip_it_says_is_a_400(api: Api, project: Project) -> None:
    status, answer, _ = await api.post(
        "/v1/ingest/agent/runs",
        data=b'{"agent_name": "plain"}',
        headers={
            **project.auth(),
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
        },
    )
    assert status == 400, answer
    assert answer["error"]["code"] == "malformed_body"
    assert "gzip" in answer["error"]["message"]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/ingest/agent/runs", {"agent_name": "a", "started_at": "0001-01-01T00:00:00+01:00"},
         "started_at"),
        ("/v1/ingest/agent/runs", {"agent_name": "a", "started_at": "9999-12-31T23:59:59-01:00"},
         "started_at"),
        ("/v1/ingest/agent/steps", [{"run_id": str(uuid.uuid4()), "step_index": 1,
                                     "started_at": "0001-01-01T00:30:00+01:00"}],
         "[0].started_at"),
        ("/v1/ingest/ai", [{"provider": "openai", "model": "gpt-4o",
                            "started_at": "9999-12-31T23:00:00-02:00"}], "[0].started_at"),
        ("/v1/ingest/agent/runs/finish", [{"id": str(uuid.uuid4()), "termination_reason":
                                           "clean", "ended_at": "0001-01-01T00:00:00+05:00"}],
         "[0].ended_at"),
    ],
)  # fmt: skip
async def test_a_time_outside_the_years_1_to_9999_in_utc_is_a_422_naming_it(
    api: Api, project: Project, path: str, body, field: str
) -> None:
    # Stored, it read back as 1 BC or year 10000, which every read of it refused.
    status, answer, _ = await api.post(path, json=body, headers=project.auth())
    assert status == 422, answer
    assert answer["error"]["field"] == field, answer


async def test_a_step_ending_after_the_year_9999_does_not_break_the_timeline(
    api: Api, project: Project
) -> None:
    _, body, _ = await api.post(
        "/v1/ingest/agent/runs", json={"agent_name": "late"}, headers=project.auth()
    )
    run_id = body["data"]["id"]
    step = {"run_id": run_id, "step_index": 1, "tool_name": "t",
            "started_at": "9999-12-31T23:59:59.999Z", "duration_ms": 5000}  # fmt: skip
    status, _, _ = await api.post("/v1/ingest/agent/steps", json=[step], headers=project.auth())
    assert status == 200
    status, answer, _ = await api.get(
        f"/v1/projects/{project.name}/agent/runs/{run_id}/timeline", headers=project.auth()
    )
    assert status == 200, answer
