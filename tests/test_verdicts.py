"""The server's verdict on runs: kept on the run as its steps arrive, listed, filtered and
counted beside what the SDK reported, against a real server and database."""

from __future__ import annotations

import asyncio
import uuid

import aiohttp
import psycopg
from conftest import Api, Project, assert_sketches_stored, query
from psycopg_pool import AsyncConnectionPool

from keelwave.server.store import run_calls, verdicts


async def start(api: Api, project: Project, name: str = "researcher") -> str:
    status, body, _ = await api.post(
        "/v1/ingest/agent/runs", json={"agent_name": name}, headers=project.auth()
    )
    assert status == 201, body
    return body["data"]["id"]


async def steps(api: Api, project: Project, run_id: str, calls: list[tuple], first: int = 1):
    body = [
        {"run_id": run_id, "step_index": first + n, "tool_name": tool, "tool_input": tool_input}
        | ({"tool_output": output} if output is not None else {})
        for n, (tool, tool_input, output) in enumerate(calls)
    ]
    status, answer, _ = await api.post("/v1/ingest/agent/steps", json=body, headers=project.auth())
    assert status == 200, answer


async def finish(api: Api, project: Project, run_id: str) -> None:
    status, body, _ = await api.post(
        f"/v1/ingest/agent/runs/{run_id}/finish",
        json={"termination_reason": "clean"},
        headers=project.auth(),
    )
    assert status == 200, body


async def run(api: Api, project: Project, run_id: str) -> dict:
    status, body, _ = await api.get(
        f"/v1/projects/{project.id}/agent/runs/{run_id}", headers=project.auth()
    )
    assert status == 200, body
    return body["data"]


async def judged(api: Api, project: Project, db_url: str, run_id: str, step_count: int) -> dict:
    """The run once the server has judged its ``step_count`` steps (it does so right
    after they are committed)."""
    for _ in range(100):
        [(verdict_steps,)] = query(
            db_url, "SELECT verdict_steps FROM agent_runs WHERE id = %s", (uuid.UUID(run_id),)
        )
        if verdict_steps == step_count:
            return await run(api, project, run_id)
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} was not judged")


async def get(api: Api, project: Project, path: str) -> dict:
    status, body, _ = await api.get(f"/v1/projects/{project.id}{path}", headers=project.auth())
    assert status == 200, body
    return body


SEARCH = {"q": "keelwave pricing", "max_results": 3}


async def test_three_identical_calls_sent_as_curl_would_are_a_detected_loop(
    api: Api, project: Project, db_url: str
) -> None:
    """The issue's first gap: steps sent without the SDK, finished clean. The stored
    loop_detected stays as reported (false); the server's verdict says loop, from step 1."""
    run_id = await start(api, project)
    await steps(api, project, run_id, [("web_search", SEARCH, None)] * 3)
    await finish(api, project, run_id)
    data = await judged(api, project, db_url, run_id, 3)
    assert data["loop_detected"] is False
    assert data["detected_loop"] is True and data["detected_loop_step_index"] == 1
    assert data["findings"] == ["exact_loop"]

    listed = await get(api, project, "/agent/runs?detected_loop=true")
    assert [r["id"] for r in listed["data"]] == [run_id]
    assert [r["id"] for r in (await get(api, project, "/agent/runs?loop=true"))["data"]] == [run_id]
    assert (await get(api, project, "/agent/runs?loop_detected=true"))["data"] == []
    assert len((await get(api, project, "/agent/runs?finding=exact_loop"))["data"]) == 1
    assert (await get(api, project, "/agent/runs?finding=cycle"))["data"] == []

    summary = (await get(api, project, "/agent/summary"))["data"]["current"]
    assert (summary["loop_runs"], summary["detected_loop_runs"]) == (0, 1)
    assert summary["detected_loop_rate"] == 1.0
    assert summary["findings"] == {"exact_loop": 1, "cycle": 0, "near_duplicate": 0,
                                   "no_progress": 0}  # fmt: skip
    [agent] = (await get(api, project, "/agent/health"))["data"]
    assert agent["detected_loop_runs"] == 1 and agent["findings"]["exact_loop"] == 1
    series = (await get(api, project, "/agent/runs/timeseries?window=1h&bucket=1h"))["data"]
    assert sum(bucket["detected_loop_runs"] for bucket in series) == 1


async def test_a_running_run_shows_its_loop_while_it_runs_and_late_steps_are_judged(
    api: Api, project: Project, db_url: str
) -> None:
    run_id = await start(api, project)
    await steps(api, project, run_id, [("search", {"q": "a"}, None), ("open", {"u": 1}, None)])
    data = await judged(api, project, db_url, run_id, 2)
    assert data["status"] == "running" and not data["detected_loop"] and data["findings"] == []
    # A B A B: a cycle of two calls, from step 1 (and two exact loops within it).
    await steps(
        api, project, run_id, [("search", {"q": "a"}, None), ("open", {"u": 1}, None)], first=3
    )
    data = await judged(api, project, db_url, run_id, 4)
    assert data["status"] == "running"
    assert data["detected_loop"] and data["detected_loop_step_index"] == 1
    assert data["findings"] == ["cycle", "exact_loop"]


async def test_near_duplicates_and_no_progress_are_findings_not_loops(
    api: Api, project: Project, db_url: str
) -> None:
    near = await start(api, project, "support")
    await steps(
        api,
        project,
        near,
        [
            ("lookup", {"order": "A-1", "request_id": str(uuid.uuid4())}, {"status": n})
            for n in range(3)
        ],  # fmt: skip
    )
    stuck = await start(api, project, "support")
    empty = {"results": []}
    await steps(
        api, project, stuck, [("search", {"q": q}, empty) for q in ("refund", "refunds", "money")]
    )
    near_run = await judged(api, project, db_url, near, 3)
    stuck_run = await judged(api, project, db_url, stuck, 3)
    assert near_run["findings"] == ["near_duplicate"] and not near_run["detected_loop"]
    assert stuck_run["findings"] == ["no_progress"] and not stuck_run["detected_loop"]
    summary = (await get(api, project, "/agent/summary"))["data"]["current"]
    assert summary["detected_loop_runs"] == 0
    assert summary["findings"]["near_duplicate"] == 1 and summary["findings"]["no_progress"] == 1


async def test_a_healthy_batch_is_no_finding(api: Api, project: Project, db_url: str) -> None:
    """Eighteen distinct files written: a batch, not a loop."""
    run_id = await start(api, project, "coder")
    await steps(
        api,
        project,
        run_id,
        [
            ("write_file", {"path": f"src/m{n}.py", "text": f"x = {n}"}, {"ok": True})
            for n in range(18)
        ],  # fmt: skip
    )
    await finish(api, project, run_id)
    data = await judged(api, project, db_url, run_id, 18)
    assert data["findings"] == [] and not data["detected_loop"]


async def test_rollups_of_verdicts_match_the_runs(api: Api, project: Project, db_url: str) -> None:
    """Many runs, some judged twice as their steps grow: the hourly counters equal a
    count over the runs themselves."""
    ids = []
    for n in range(12):
        run_id = await start(api, project, f"agent-{n % 3}")
        ids.append(run_id)
        calls = [("search", {"q": n}, None)] * (1 + n % 3)
        await steps(api, project, run_id, calls)
        if n % 2:
            await steps(api, project, run_id, [("open", {"u": n}, None)], first=len(calls) + 1)
    for n, run_id in enumerate(ids):
        await judged(api, project, db_url, run_id, 1 + n % 3 + n % 2)
    [(counted, expected)] = query(
        db_url,
        "SELECT (SELECT sum(detected_loop_runs) FROM agent_run_rollups WHERE project_id = %s), "
        "(SELECT count(*) FILTER (WHERE detected_loop) FROM agent_runs WHERE project_id = %s)",
        (uuid.UUID(project.id), uuid.UUID(project.id)),
    )
    assert counted == expected == 8  # runs with 2 or 3 identical searches
    summary = (await get(api, project, "/agent/summary"))["data"]["current"]
    assert summary["detected_loop_runs"] == 8 and summary["findings"]["exact_loop"] == 8


async def test_keepers_of_several_servers_share_the_work_and_count_each_run_once(
    api: Api, project: Project, db_url: str
) -> None:
    """Two more keepers (as two more server processes would run) judging at once with the
    server's own: every run is judged, and the rollups count it once."""
    ids = []
    for n in range(40):
        run_id = await start(api, project, "swarm")
        ids.append(run_id)
        await steps(api, project, run_id, [("search", {"q": n % 7}, None)] * (2 + n % 2))
    async with AsyncConnectionPool(db_url, kwargs={"autocommit": True}, open=False) as pool:
        await asyncio.gather(*(verdicts.judge(pool, limit=5) for _ in range(8)))
    for n, run_id in enumerate(ids):
        await judged(api, project, db_url, run_id, 2 + n % 2)
    [(counted, expected)] = query(
        db_url,
        "SELECT (SELECT sum(detected_loop_runs) FROM agent_run_rollups WHERE project_id = %s), "
        "(SELECT count(*) FILTER (WHERE detected_loop) FROM agent_runs WHERE project_id = %s)",
        (uuid.UUID(project.id), uuid.UUID(project.id)),
    )
    assert counted == expected == 40


async def test_calls_that_differ_only_in_a_secret_are_no_loop_as_loops_says(
    api: Api, project: Project, db_url: str
) -> None:
    """The server stores both inputs redacted, alike; they were different calls as sent,
    and the verdict says what /loops says (both go by the fingerprint of the bytes as
    sent): no loop. The same call twice is one."""
    run_id = await start(api, project)
    calls = [("login", {"user": "ann", "password": password}, None)
             for password in ("first-secret", "second-secret", "third-secret")]  # fmt: skip
    await steps(api, project, run_id, calls)
    await finish(api, project, run_id)
    data = await judged(api, project, db_url, run_id, 3)
    loops = await get(api, project, f"/agent/runs/{run_id}/loops")
    assert loops["data"] == []
    assert data["detected_loop"] is False and "exact_loop" not in data["findings"]
    findings = await get(api, project, f"/agent/runs/{run_id}/findings")
    assert [f["kind"] for f in findings["data"]] == ["near_duplicate"]  # alike once redacted

    again = await start(api, project)
    await steps(api, project, again, [calls[0], calls[0]])
    data = await judged(api, project, db_url, again, 2)
    assert data["detected_loop"] is True and data["findings"] == ["exact_loop"]


async def test_the_keeper_never_waits_for_a_run_a_writer_holds(
    db_url: str, project: Project, aiohttp_server
) -> None:
    """A round that waited for one locked run while holding the others would queue every
    writer of those behind it: it judges the others and leaves that run for later."""
    import psycopg
    from conftest import make_settings

    from keelwave.server.app import create_app
    from keelwave.server.store import statements

    server = await aiohttp_server(create_app(make_settings(server_verdicts=False), db_url))
    async with aiohttp.ClientSession() as session:
        own = Api(str(server.make_url("")).rstrip("/"), session)
        held, free = await start(own, project), await start(own, project)
        for run_id in (held, free):
            await steps(own, project, run_id, [("search", SEARCH, None)] * 2)
            await finish(own, project, run_id)
        writer = psycopg.connect(db_url)  # a writer in the middle of a transaction on `held`
        try:
            writer.execute(*statements.lock_statement({uuid.UUID(held).int}))
            async with AsyncConnectionPool(db_url, kwargs={"autocommit": True}, open=False) as pool:
                done = await asyncio.wait_for(verdicts.judge(pool), timeout=60)
                assert {str(run) for _, run in done} == {free}
                writer.rollback()  # the writer commits: the run is judged next round
                done = await asyncio.wait_for(verdicts.judge(pool), timeout=60)
                assert {str(run) for _, run in done} == {held}
        finally:
            writer.close()
        for run_id in (held, free):
            assert (await run(own, project, run_id))["detected_loop"] is True


async def test_the_keeper_reads_back_only_the_inputs_that_may_be_near_duplicates(
    api: Api, project: Project, db_url: str
) -> None:
    """Each step keeps its input's sketch; the keeper reads the inputs of the calls whose
    sketch three share (the near-duplicates' candidates), not those of the other calls,
    and the outputs of three calls of one tool in a row only."""
    run_id = await start(api, project)
    lookups = [("lookup", {"order": "A-1", "request_id": str(uuid.uuid4())}, {"n": n})
               for n in range(3)]  # fmt: skip
    fetches = [("fetch", {"topic": word}, {"n": n})
               for n, word in enumerate(("alpha", "beta", "gamma"))]  # fmt: skip
    await steps(api, project, run_id, [*lookups, *fetches])
    status, _, _ = await api.post(
        "/v1/ingest/agent/steps",
        json={"run_id": run_id, "step_index": 7, "step_type": "think", "content": "hm"},
        headers=project.auth(),
    )
    assert status == 200
    data = await judged(api, project, db_url, run_id, 7)
    assert data["findings"] == ["near_duplicate"] and not data["detected_loop"]
    assert assert_sketches_stored(db_url, project.id) == 6

    key = (uuid.UUID(project.id), uuid.UUID(run_id))
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:

        async def fetch(sql: str, params: dict) -> list[tuple]:
            return await (await conn.execute(sql, params)).fetchall()

        read = await run_calls.read_calls(fetch, [key])
    assert read.counts == {key: 7} and not read.changed
    got = {call.step_index: (call.tool_input is not None, call.tool_output is not None)
           for call in read.calls[key]}  # fmt: skip
    # steps 1-3: alike once the request id is masked; 4-6: a tool called three times
    # whose inputs share no sketch. Both are three calls of one tool in a row.
    assert got == {1: (True, True), 2: (True, True), 3: (True, True),
                   4: (False, True), 5: (False, True), 6: (False, True)}  # fmt: skip


async def test_runs_with_steps_stored_before_sketches_get_the_same_verdict(
    db_url: str, project: Project, aiohttp_server
) -> None:
    """Steps stored before migration 0019 have no sketch: the keeper sketches their inputs
    itself, in runs wholly from before and in runs half before, half after."""
    import psycopg
    from conftest import make_settings

    from keelwave.server.app import create_app

    server = await aiohttp_server(create_app(make_settings(server_verdicts=False), db_url))
    async with aiohttp.ClientSession() as session:
        own = Api(str(server.make_url("")).rstrip("/"), session)
        calls = [("lookup", {"order": "A-1", "request_id": str(uuid.uuid4())}, None)
                 for _ in range(3)] + [("fetch", {"url": f"https://x.io/{n}"}, None)
                                       for n in range(3)]  # fmt: skip
        runs = {}
        for unsketched in ("none", "some", "all"):
            runs[unsketched] = await start(own, project)
            await steps(own, project, runs[unsketched], calls)
        with psycopg.connect(db_url, autocommit=True) as conn:
            for unsketched, steps_before in (("some", [1, 4]), ("all", [1, 2, 3, 4, 5, 6])):
                conn.execute(
                    "UPDATE agent_steps SET input_sketch = NULL WHERE project_id = %s "
                    "AND run_id = %s AND step_index = ANY(%s)",
                    (uuid.UUID(project.id), uuid.UUID(runs[unsketched]), steps_before),
                )
        async with AsyncConnectionPool(db_url, kwargs={"autocommit": True}, open=False) as pool:
            judged_now = await verdicts.judge(pool)
        assert {str(run) for _, run in judged_now} >= set(runs.values())
        for run_id in runs.values():
            data = await run(own, project, run_id)
            assert data["findings"] == ["near_duplicate"], data


async def test_runs_going_now_are_judged_before_a_backlog_of_old_ones(
    db_url: str, project: Project, aiohttp_server
) -> None:
    """A bulk load of history, or a recount, leaves thousands of old runs due at once,
    which the keeper takes hours' worth of rounds to judge on a big data set. An agent
    looping now must not wait behind them: a round takes the runs active in the last
    minute first, and fills up with the oldest of the others."""
    from conftest import make_settings

    from keelwave.server.app import create_app

    server = await aiohttp_server(create_app(make_settings(server_verdicts=False), db_url))
    async with aiohttp.ClientSession() as session:
        own = Api(str(server.make_url("")).rstrip("/"), session)
        history = []
        for _ in range(6):
            run_id = await start(own, project, "imported")
            await steps(own, project, run_id, [("search", SEARCH, None)] * 3)
            await finish(own, project, run_id)
            history.append(run_id)
        # As a recount or an import leaves them: due, last active two days ago.
        query(
            db_url,
            "UPDATE agent_runs SET last_activity_at = now() - interval '2 days' "
            "WHERE id = ANY(%s) RETURNING id",
            ([uuid.UUID(run_id) for run_id in history],),
        )
        live = await start(own, project, "looping-now")
        await steps(own, project, live, [("search", SEARCH, None)] * 3)

        async with AsyncConnectionPool(db_url, kwargs={"autocommit": True}, open=False) as pool:
            first = await verdicts.judge(pool, limit=3)
            assert str(live) in {str(run) for _, run in first}
            assert len(first) == 3  # filled up with history
            assert (await run(own, project, live))["detected_loop"] is True
            rest = {str(run) for _, run in await verdicts.judge(pool, limit=10)}
        assert {str(run) for _, run in first} | rest == {live, *history}
        for run_id in history:
            assert (await run(own, project, run_id))["detected_loop"] is True
