"""The run explorer's API over real HTTP: a run's timeline, two runs compared, the runs
list sorted and filtered, tracebacks and model-call messages, cost by model and agent.

The data is sent through ingest with known times and nesting, and every answer is
checked against what was sent.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from conftest import Api, Project, create_database, drop_database, make_project, serving

T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


async def ok(api: Api, path: str, body: object, project: Project, status: int = 200) -> dict:
    got, answer, _ = await api.post(path, json=body, headers=project.auth("ingest"))
    assert got == status, answer
    return answer


async def read(api: Api, project: Project, path: str, **query) -> tuple[int, dict]:
    status, body, _ = await api.get(
        f"/v1/projects/{project.id}/agent{path}", params=query, headers=project.auth("read")
    )
    return status, body


async def start(api: Api, project: Project, agent: str, seconds: float, **fields) -> str:
    run_id = fields.pop("id", None) or str(uuid.uuid4())
    body = {"id": run_id, "agent_name": agent, "started_at": at(seconds), **fields}
    await ok(api, "/v1/ingest/agent/runs", body, project, 201)
    return run_id


async def finish(api: Api, project: Project, run_id: str, seconds: float, **fields) -> None:
    body = {"termination_reason": "clean", "ended_at": at(seconds), **fields}
    await ok(api, f"/v1/ingest/agent/runs/{run_id}/finish", body, project)


async def steps(api: Api, project: Project, run_id: str, *specs: dict) -> None:
    await ok(api, "/v1/ingest/agent/steps", [{"run_id": run_id, **spec} for spec in specs], project)


# -- the timeline ---------------------------------------------------------------


@pytest.fixture
async def nested(api: Api, project: Project) -> dict:
    """A parent run of known shape: two concurrent searches at t=1, a model call at
    t=1 (same moment: after the steps), a thought, a child run started at t=3 during
    step 3, a model call linked to step 4, and a model call at t=3 (before the child)."""
    parent = await start(api, project, "planner", 0)
    await steps(
        api, project, parent,
        {"step_index": 1, "tool_name": "search", "tool_input": {"q": "a"}, "started_at": at(1),
         "duration_ms": 1500, "tool_output": {"hits": 1}},
        {"step_index": 2, "tool_name": "search", "tool_input": {"q": "a"}, "started_at": at(1),
         "duration_ms": 800},
        {"step_index": 3, "step_type": "think", "content": "delegate", "started_at": at(2.5),
         "duration_ms": 3000},
        {"step_index": 4, "tool_name": "write", "tool_input": {"text": "x"}, "started_at": at(6),
         "duration_ms": 100, "error": "ValueError: nope"},
    )  # fmt: skip
    calls = [
        {"id": str(uuid.uuid4()), "provider": "openai", "model": "gpt-4o", "run_id": parent,
         "started_at": at(1), "latency_ms": 400, "input_tokens": 10, "output_tokens": 5},
        {"id": str(uuid.uuid4()), "provider": "openai", "model": "gpt-4o", "run_id": parent,
         "step_index": 4, "started_at": at(6.02), "latency_ms": 50, "input_tokens": 7},
        {"id": str(uuid.uuid4()), "provider": "openai", "model": "gpt-4o-mini", "run_id": parent,
         "started_at": at(3), "latency_ms": 20},
    ]  # fmt: skip
    await ok(api, "/v1/ingest/ai", calls, project)
    child = await start(api, project, "researcher", 3, parent_run_id=parent, tags=["sub"])
    await steps(api, project, child, {"step_index": 1, "tool_name": "fetch", "started_at": at(3.1)})
    await finish(api, project, child, 5)
    await finish(api, project, parent, 7)
    return {"parent": parent, "child": child, "calls": [call["id"] for call in calls]}


def place(item: dict) -> tuple:
    key = {"step": "step_index", "model_call": "id", "child_run": "run_id"}[item["kind"]]
    return (item["kind"], item[key])


async def test_timeline_interleaves_steps_model_calls_and_child_runs(api, project, nested):
    status, body = await read(api, project, f"/runs/{nested['parent']}/timeline")
    assert status == 200, body
    calls = nested["calls"]
    assert [place(item) for item in body["data"]] == [
        ("step", 1),
        ("step", 2),
        ("model_call", calls[0]),
        ("step", 3),
        ("model_call", calls[2]),
        ("child_run", nested["child"]),
        ("step", 4),
        ("model_call", calls[1]),
    ]
    assert body["next_cursor"] is None
    first, second, call, _, _, child, failed, linked = body["data"]
    # Steps carry every field of /steps, and where they end.
    assert first["tool_name"] == "search" and first["tool_output"] == {"hits": 1}
    assert first["in_loop"] and first["loop_hits"] == 2 and second["in_loop"]
    assert first["fingerprint"] == second["fingerprint"]
    assert datetime.fromisoformat(first["ended_at"]) == T0 + timedelta(seconds=2.5)
    assert failed["error"] == "ValueError: nope" and failed["error_traceback"] is None
    assert not failed["in_loop"] and failed["loop_hits"] == 0
    # Model calls: every field of /llm; the duration is the latency.
    assert call["model"] == "gpt-4o" and call["duration_ms"] == 400 and call["step_index"] is None
    assert datetime.fromisoformat(call["ended_at"]) == T0 + timedelta(seconds=1.4)
    assert linked["step_index"] == 4 and linked["input_messages"] is None
    # The child run as a runs-list row, its id as run_id.
    assert child["agent_name"] == "researcher" and child["status"] == "finished"
    assert child["termination_reason"] == "clean" and child["step_count"] == 1
    assert child["tags"] == ["sub"] and child["parent_run_id"] == nested["parent"]
    assert child["duration_ms"] == 2000 and child["child_count"] == 0
    assert child["from_spans"] is False  # sent through the SDK's API, not as spans


async def test_timeline_pages_add_up_to_the_whole(api, project, nested):
    _, whole = await read(api, project, f"/runs/{nested['parent']}/timeline")
    for limit in (1, 2, 3, 7):
        items, cursor = [], None
        while True:
            query = {"limit": limit, **({"cursor": cursor} if cursor else {})}
            status, page = await read(api, project, f"/runs/{nested['parent']}/timeline", **query)
            assert status == 200, page
            assert len(page["data"]) <= limit
            items.extend(page["data"])
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert items == whole["data"], limit


async def test_timeline_of_a_child_run_and_of_unknown_runs(api, project, nested):
    status, body = await read(api, project, f"/runs/{nested['child']}/timeline")
    assert status == 200
    assert [item["kind"] for item in body["data"]] == ["step"]
    status, body = await read(api, project, f"/runs/{uuid.uuid4()}/timeline")
    assert status == 404 and body["error"]["code"] == "not_found"
    status, body = await read(api, project, f"/runs/{nested['parent']}/timeline", limit=5001)
    assert status == 422 and body["error"]["field"] == "limit"
    status, body = await read(api, project, f"/runs/{nested['parent']}/timeline", cursor="nope")
    assert status == 422 and body["error"]["field"] == "cursor"


# -- compare ---------------------------------------------------------------------


async def two_runs(api: Api, project: Project) -> tuple[str, str]:
    """a: search(x) → think → fetch(1) → write; b: search(x) → think' → search(y) →
    fetch(1, other output); so: same, changed_input (thought), only_b, changed_output,
    only_a."""
    a = await start(api, project, "agent-a", 0)
    b = await start(api, project, "agent-b", 10)
    await steps(
        api, project, a,
        {"step_index": 1, "tool_name": "search", "tool_input": {"q": "x"}, "tool_output": [1]},
        {"step_index": 2, "step_type": "think", "content": "plan"},
        {"step_index": 3, "tool_name": "fetch", "tool_input": {"id": 1}, "tool_output": "old"},
        {"step_index": 4, "tool_name": "write", "tool_input": {}},
    )  # fmt: skip
    await steps(
        api, project, b,
        {"step_index": 1, "tool_name": "search", "tool_input": {"q": "x"}, "tool_output": [1]},
        {"step_index": 2, "step_type": "think", "content": "another plan"},
        {"step_index": 3, "tool_name": "search", "tool_input": {"q": "y"}},
        {"step_index": 4, "tool_name": "fetch", "tool_input": {"id": 1}, "tool_output": "new"},
    )  # fmt: skip
    await ok(
        api, "/v1/ingest/ai",
        [{"provider": "openai", "model": "m", "run_id": a, "input_tokens": 100,
          "output_tokens": 10, "cost_usd": 0.25},
         {"provider": "openai", "model": "m", "run_id": b, "input_tokens": 130,
          "output_tokens": 10, "cost_usd": 0.5},
         {"provider": "openai", "model": "m", "run_id": b, "input_tokens": 20, "cost_usd": 0.25}],
        project,
    )  # fmt: skip
    await finish(api, project, a, 4)
    await finish(api, project, b, 19, termination_reason="max_steps_reached")
    return a, b


async def test_compare_aligns_the_steps_of_two_runs(api, project):
    a, b = await two_runs(api, project)
    status, body = await read(api, project, "/runs/compare", a=a, b=b)
    assert status == 200, body
    data = body["data"]
    assert data["aligned"] == "lcs"
    assert data["a"]["id"] == a and data["a"]["agent_name"] == "agent-a"
    assert data["b"]["termination_reason"] == "max_steps_reached"
    assert data["b"]["status"] == "finished"
    got = [
        (
            row["status"],
            row["a"]["step_index"] if row["a"] else None,
            row["b"]["step_index"] if row["b"] else None,
        )
        for row in data["steps"]
    ]
    assert got == [
        ("same", 1, 1),
        ("changed_input", 2, 2),
        ("only_b", None, 3),
        ("changed_output", 3, 4),
        ("only_a", 4, None),
    ]
    assert data["steps"][3]["a"]["tool_output"] == "old"
    assert data["steps"][3]["b"]["tool_output"] == "new"
    totals = data["totals"]
    assert totals["step_count"] == {"a": 4, "b": 4, "delta": 0}
    assert totals["input_tokens"] == {"a": 100, "b": 150, "delta": 50}
    assert totals["llm_calls"] == {"a": 1, "b": 2, "delta": 1}
    assert totals["cost_usd"] == {"a": 0.25, "b": 0.75, "delta": 0.5}
    assert totals["duration_ms"] == {"a": 4000, "b": 9000, "delta": 5000}


async def test_compare_refuses_what_it_cannot_compare(api, project):
    a, _ = await two_runs(api, project)
    status, body = await read(api, project, "/runs/compare", a=a)
    assert status == 422 and body["error"]["field"] == "b"
    status, body = await read(api, project, "/runs/compare", a="not-a-run", b=a)
    assert status == 422 and body["error"]["field"] == "a"
    assert "not-a-run" in body["error"]["message"]
    status, body = await read(api, project, "/runs/compare", a=a, b=str(uuid.uuid4()))
    assert status == 404 and body["error"]["code"] == "not_found"


async def test_compare_is_a_route_of_its_own_not_a_run_id(api, project):
    """/runs/compare is not read as the run 'compare' (which would be a 404)."""
    a, b = await two_runs(api, project)
    status, _ = await read(api, project, "/runs/compare", a=a, b=b)
    assert status == 200
    status, body = await read(api, project, f"/runs/{a}")
    assert status == 200 and body["data"]["id"] == a


# -- the runs list: sort, filters, child counts ------------------------------------


@pytest.fixture
async def listed(api: Api, project: Project) -> list[dict]:
    """Twelve runs with known durations (three unfinished), costs, steps, tokens, tags,
    metadata and tools; ties on purpose (equal costs and step counts, two starts at
    the same moment); runs 1 and 2 are children of run 0, run 3 a child of run 1."""
    runs = []
    for n in range(12):
        run = {
            "id": str(uuid.uuid4()),
            "agent": ["alpha", "beta", "gamma"][n % 3],
            "started": 100 + n * 10 if n != 5 else 140,  # run 5 starts with run 4
            "duration_ms": None if n in (2, 7, 9) else [900, 300, 0, 4000, 300, 50][n % 6] + n,
            "cost": [0.5, 0.25, 0.25, 0.0, 1.0][n % 5],
            "steps": n % 4,
            "tokens": (n * 37) % 100,
            "tags": ["prod", "eu"] if n % 2 == 0 else (["prod"] if n % 3 == 0 else []),
            "metadata": {"team": "search" if n < 6 else "ads", "tier": n % 2, "user": f"u{n % 3}"},
            "parent": None,
        }
        runs.append(run)
    runs[1]["parent"] = runs[2]["parent"] = runs[0]["id"]
    runs[3]["parent"] = runs[1]["id"]
    for n, run in enumerate(runs):
        fields = {"tags": run["tags"], "metadata": run["metadata"]}
        if run["parent"]:
            fields["parent_run_id"] = run["parent"]
        await start(api, project, run["agent"], run["started"], id=run["id"], **fields)
        specs = [
            {"step_index": i, "tool_name": "search" if n % 2 else "fetch", "tool_input": {"i": i}}
            for i in range(1, run["steps"] + 1)
        ]
        if specs:
            await steps(api, project, run["id"], *specs)
        if run["cost"] or run["tokens"]:
            call = {"provider": "openai", "model": "m", "run_id": run["id"],
                    "cost_usd": run["cost"], "input_tokens": run["tokens"],
                    "output_tokens": n}  # fmt: skip
            await ok(api, "/v1/ingest/ai", call, project)
            run["tokens"] += n
        if run["duration_ms"] is not None:
            ended = run["started"] + run["duration_ms"] / 1000
            await finish(api, project, run["id"], ended)
    return runs


async def all_pages(api: Api, project: Project, **query) -> list[dict]:
    rows, cursor = [], None
    while True:
        status, page = await read(
            api, project, "/runs", **query, **({"cursor": cursor} if cursor else {})
        )
        assert status == 200, page
        rows.extend(page["data"])
        cursor = page["next_cursor"]
        if cursor is None:
            return rows


def expected(runs: list[dict], value, direction: str) -> list[str]:
    """The runs by value (None last in both orders), then by start and id, as the API sorts."""
    descending = direction == "desc"

    def place(run: dict) -> tuple:
        return (at(run["started"]), uuid.UUID(run["id"]))

    valued = sorted(
        (run for run in runs if value(run) is not None),
        key=lambda run: (value(run), *place(run)),
        reverse=descending,
    )
    missing = sorted((run for run in runs if value(run) is None), key=place, reverse=descending)
    return [run["id"] for run in valued + missing]


SORT_VALUES = {
    "started_at": lambda run: at(run["started"]),
    "duration_ms": lambda run: run["duration_ms"],
    "cost_usd": lambda run: run["cost"],
    "step_count": lambda run: run["steps"],
    "tokens": lambda run: run["tokens"],
    "agent_name": lambda run: run["agent"],
}


@pytest.mark.parametrize("sort", list(SORT_VALUES))
@pytest.mark.parametrize("order", ["desc", "asc"])
async def test_runs_sort_by_every_column_across_pages(api, project, listed, sort, order):
    want = expected(listed, SORT_VALUES[sort], order)
    for limit in (3, 5, 50):
        got = await all_pages(api, project, sort=sort, order=order, limit=limit)
        assert [row["id"] for row in got] == want, (sort, order, limit)


async def test_runs_default_order_is_newest_first(api, project, listed):
    got = await all_pages(api, project, limit=4)
    assert [row["id"] for row in got] == expected(listed, SORT_VALUES["started_at"], "desc")


async def test_a_page_stays_put_while_runs_arrive(api, project, listed):
    status, first = await read(api, project, "/runs", sort="cost_usd", limit=4)
    assert status == 200
    for seconds in (0, 500):  # a cheap run and a dear one, the newest and the oldest
        run_id = await start(api, project, "late", seconds)
        call = {"provider": "openai", "model": "m", "run_id": run_id, "cost_usd": 0.3}
        await ok(api, "/v1/ingest/ai", call, project)
    rest = []
    cursor = first["next_cursor"]
    while cursor:
        _, page = await read(api, project, "/runs", sort="cost_usd", limit=4, cursor=cursor)
        rest.extend(page["data"])
        cursor = page["next_cursor"]
    seen = [row["id"] for row in first["data"] + rest if row["agent_name"] != "late"]
    assert seen == expected(listed, SORT_VALUES["cost_usd"], "desc")


async def test_runs_filters(api, project, listed):
    async def ids(**query) -> set[str]:
        return {row["id"] for row in await all_pages(api, project, **query)}

    def where(test) -> set[str]:
        return {run["id"] for run in listed if test(run)}

    assert await ids(tag="prod") == where(lambda run: "prod" in run["tags"])
    assert await ids(tag=["prod", "eu"]) == where(lambda run: "eu" in run["tags"])
    assert await ids(tag="nope") == set()
    assert await ids(metadata="team=ads") == where(lambda run: run["metadata"]["team"] == "ads")
    assert await ids(metadata=["team=search", "user=u1"]) == where(
        lambda run: run["metadata"]["team"] == "search" and run["metadata"]["user"] == "u1"
    )
    # A string value: tier is a number in the metadata.
    assert await ids(metadata="tier=1") == set()
    # One key, two values: no run has both; one value twice is asked once.
    assert await ids(metadata=["team=search", "team=ads"]) == set()
    assert await ids(metadata=["team=search", "team=ads"], tag="prod", agent_name="beta") == set()
    assert await ids(metadata=["team=ads", "team=ads"]) == await ids(metadata="team=ads")
    assert await ids(metadata=["team=ads", "user=u1", "team=ads"]) == where(
        lambda run: run["metadata"]["team"] == "ads" and run["metadata"]["user"] == "u1"
    )
    assert await ids(tool="search") == where(lambda run: run["steps"] and listed.index(run) % 2)
    assert await ids(root="true") == where(lambda run: run["parent"] is None)
    assert await ids(root="false") == where(lambda run: run["parent"] is not None)
    assert await ids(parent_run_id=listed[0]["id"]) == {listed[1]["id"], listed[2]["id"]}
    both = await ids(tag="prod", agent_name="alpha", sort="cost_usd")
    assert both == where(lambda run: "prod" in run["tags"] and run["agent"] == "alpha")
    # since/until: the window of starts, as before.
    window = await ids(since=at(130), until=at(160))
    assert window == where(lambda run: 130 <= run["started"] < 160)


@pytest.mark.parametrize("listed_up_to", [1, 2_000])
async def test_runs_by_tool_from_the_tools_runs_or_run_by_run(
    api, project, listed, monkeypatch, listed_up_to
):
    """``tool`` keeps the runs with a step of that tool whichever way they are found: from
    the ids of the few runs that called it, or run by run when more did (run_tools.py),
    page after page in any order, with other filters, and none for a tool no step has."""
    from keelwave.server.query import run_tools

    monkeypatch.setattr(run_tools, "LISTED", listed_up_to)

    async def ids(**query) -> list[str]:
        return [row["id"] for row in await all_pages(api, project, limit=2, **query)]

    def where(test, sort: str = "started_at") -> list[str]:
        chosen = [run for run in listed if test(run)]
        return expected(chosen, SORT_VALUES[sort], "desc")

    def calls(tool: str):
        return lambda run: run["steps"] and (listed.index(run) % 2 == (tool == "search"))

    for tool in ("search", "fetch"):
        assert await ids(tool=tool) == where(calls(tool))
        assert await ids(tool=tool, sort="cost_usd") == where(calls(tool), "cost_usd")
        assert await ids(tool=tool, agent_name="beta") == where(
            lambda run, tool=tool: calls(tool)(run) and run["agent"] == "beta"
        )
    assert await ids(tool="no such tool") == []


@pytest.mark.parametrize(
    ("walked", "rare", "listed_up_to", "runs_estimate"),
    [
        (5_000, 0.05, 2_000, None),
        (3, 0.05, 2_000, None),
        (3, 0.5, 2_000, None),
        (3, 0.5, 2_000, "SELECT 1"),  # every value few runs have: read alone where rare
        (3, 0.0, 2_000, None),
        (3, 0.05, 1, None),
    ],
)
async def test_runs_by_tags_and_metadata_among_other_conditions_whichever_way_found(
    api, project, listed, monkeypatch, walked, rare, listed_up_to, runs_estimate
):
    """Two tags or metadata values, or one and another filter, keep exactly the runs
    with all of them whichever way the page is found (run_containment.py): among the
    first runs walked in the list's order, from the indexes of the rare values or of
    all, or as planned when more pass; page after page, in sorts with and without an
    index, and none when no run has all."""
    from keelwave.server.query import run_containment, run_tools

    monkeypatch.setattr(run_containment, "WALKED", walked)
    monkeypatch.setattr(run_containment, "RARE", rare)
    monkeypatch.setattr(run_containment, "LISTED", listed_up_to)
    if runs_estimate is not None:
        monkeypatch.setattr(run_containment, "_RUNS_ESTIMATE", runs_estimate)

    async def ids(sort: str = "started_at", order: str = "desc", **query) -> list[str]:
        rows = await all_pages(api, project, limit=2, sort=sort, order=order, **query)
        return [row["id"] for row in rows]

    def where(test, sort: str = "started_at", order: str = "desc") -> list[str]:
        return expected([run for run in listed if test(run)], SORT_VALUES[sort], order)

    def tagged(*tags: str):
        return lambda run: set(tags) <= set(run["tags"])

    for sort in SORT_VALUES:
        for order in ("desc", "asc"):
            assert await ids(sort, order, tag=["prod", "eu"]) == where(
                tagged("prod", "eu"), sort, order
            ), (sort, order)
    assert await ids(tag=["prod", "eu"], agent_name="beta") == where(
        lambda run: tagged("prod", "eu")(run) and run["agent"] == "beta"
    )
    assert await ids("cost_usd", tag="prod", agent_name="alpha") == where(
        lambda run: tagged("prod")(run) and run["agent"] == "alpha", "cost_usd"
    )
    assert await ids(tag=["eu", "nope"]) == []

    def has(**values):
        return lambda run: all(run["metadata"][key] == value for key, value in values.items())

    assert await ids(metadata=["team=search", "tier=0"]) == []  # tier is a number
    assert await ids("agent_name", metadata=["team=search", "user=u1"]) == where(
        has(team="search", user="u1"), "agent_name"
    )
    assert await ids(metadata=["team=search", "team=ads"]) == []
    assert await ids("duration_ms", "asc", metadata="team=ads", tag="prod") == where(
        lambda run: has(team="ads")(run) and tagged("prod")(run), "duration_ms", "asc"
    )
    assert await ids(metadata="user=u2", agent_name="gamma") == where(
        lambda run: has(user="u2")(run) and run["agent"] == "gamma"
    )
    monkeypatch.setattr(run_tools, "LISTED", 1)  # the tool's runs probed one by one
    assert await ids(tag="prod", tool="fetch") == where(
        lambda run: tagged("prod")(run) and run["steps"] and listed.index(run) % 2 == 0
    )
    assert await ids(tag=["prod", "eu"], tool="fetch") == where(
        lambda run: tagged("prod", "eu")(run) and run["steps"] and listed.index(run) % 2 == 0
    )
    assert await ids(tag=["prod", "eu"], tool="search") == []  # (eu: even runs, fetch)
    assert await ids("tokens", tag="eu", agent_name="gamma", status="finished") == where(
        lambda run: (
            tagged("eu")(run) and run["agent"] == "gamma" and run["duration_ms"] is not None
        ),
        "tokens",
    )


@pytest.fixture
def parallel_db_url(template_database: str):
    """A database whose every query PostgreSQL runs in a parallel worker where it can, as
    it chooses to on a big project's tables."""
    name = f"kw_parallel_{uuid.uuid4().hex[:12]}"
    url = create_database(name, template=template_database)
    with psycopg.connect(url, autocommit=True) as conn:
        version = int(conn.execute("SHOW server_version_num").fetchone()[0])
        setting = "debug_parallel_query" if version >= 160000 else "force_parallel_mode"
        conn.execute(f"ALTER DATABASE {name} SET {setting} = on")
    yield url
    drop_database(name)


async def test_every_read_and_erasure_in_parallel_workers(parallel_db_url, aiohttp_server):
    """The API answers where PostgreSQL runs queries in parallel workers, as it chooses
    to on a big project's tables. keelwave_jsonb (migration 0009) opens a
    subtransaction, which parallel mode refuses: the metadata filter answered 500
    there (migration 0026)."""
    project = make_project(parallel_db_url)
    async with serving(parallel_db_url, aiohttp_server, 64 * 1024) as api:
        plain = await start(api, project, "alpha", 1, metadata={"team": "search"}, tags=["a"])
        # JSON that jsonb refuses as it is (an escaped NUL): keelwave_jsonb's other way
        odd = await start(api, project, "beta", 2, metadata={"team": "search", "note": "a\x00b"})
        other = await start(api, project, "alpha", 3, metadata={"team": "ads"})
        await steps(api, project, plain, {"step_index": 1, "tool_name": "t", "tool_input": {}})
        await finish(api, project, plain, 4)
        for query, wanted in (
            ({"metadata": "team=search"}, [odd, plain]),
            ({"metadata": "team=search", "agent_name": "beta"}, [odd]),
            ({"metadata": "team=search", "tag": "a", "sort": "tokens"}, [plain]),
            ({"q": "alp", "sort": "step_count"}, [plain, other]),
            ({"tool": "t"}, [plain]),
        ):
            status, body = await read(api, project, "/runs", **query)
            assert status == 200, (query, body)
            assert [row["id"] for row in body["data"]] == wanted, query
            assert not any(row["from_spans"] for row in body["data"])
        for path in (
            f"/runs/{odd}", f"/runs/{plain}/timeline", f"/runs/{plain}/steps",
            f"/runs/{plain}/loops", f"/runs/{plain}/findings", "/summary", "/health",
            f"/runs/{plain}/llm", "/runs/timeseries", "/runs/terminations", "/tools", "/cost",
            "/findings", f"/runs/compare?a={plain}&b={other}",
        ):  # fmt: skip
            status, body = await read(api, project, path)
            assert status == 200, (path, body)
        status, body, _ = await api.post(
            f"/v1/projects/{project.id}/agent/runs/delete",
            json={"metadata": {"team": "search"}},
            headers=project.auth("all"),
        )
        assert status == 200, body
        status, body = await read(api, project, "/runs")
        assert [row["id"] for row in body["data"]] == [other]


async def test_runs_rows_count_their_children(api, project, listed):
    rows = {row["id"]: row for row in await all_pages(api, project)}
    assert rows[listed[0]["id"]]["child_count"] == 2
    assert rows[listed[1]["id"]]["child_count"] == 1
    assert rows[listed[1]["id"]]["parent_run_id"] == listed[0]["id"]
    assert rows[listed[4]["id"]]["child_count"] == 0
    assert not any(row["from_spans"] for row in rows.values())
    status, detail = await read(api, project, f"/runs/{listed[0]['id']}")
    assert status == 200 and sorted(detail["data"]["child_runs"]) == sorted(
        [listed[1]["id"], listed[2]["id"]]
    )
    assert detail["data"]["child_count"] == 2


@pytest.mark.parametrize(
    ("query", "field", "says"),
    [
        (
            {"sort": "cost"},
            "sort",
            "started_at, duration_ms, cost_usd, step_count, tokens, agent_name",
        ),
        ({"order": "up"}, "order", "desc, asc"),
        ({"metadata": "team"}, "metadata", "KEY=VALUE"),
        ({"metadata": "=x"}, "metadata", "KEY=VALUE"),
        ({"parent_run_id": "nope"}, "parent_run_id", "UUID"),
        ({"root": "maybe"}, "root", "true or false"),
        ({"status": "error"}, "status", "running, stalled, finished"),
        ({"tag": "x" * 300}, "tag", "256"),
    ],
)
async def test_runs_list_refuses_bad_parameters(api, project, query, field, says):
    status, body = await read(api, project, "/runs", **query)
    assert status == 422, body
    assert body["error"]["field"] == field and says in body["error"]["message"]


async def test_a_cursor_of_one_sort_is_refused_by_another(api, project, listed):
    _, page = await read(api, project, "/runs", sort="cost_usd", limit=2)
    status, body = await read(api, project, "/runs", sort="tokens", cursor=page["next_cursor"])
    assert status == 422 and body["error"]["field"] == "cursor"
    assert "another sort" in body["error"]["message"]
    status, body = await read(
        api, project, "/runs", cursor=page["next_cursor"], order="asc", sort="cost_usd"
    )
    assert status == 422 and body["error"]["field"] == "cursor"


# -- cost by model and by agent ------------------------------------------------------


@pytest.fixture
async def priced(api: Api, project: Project) -> list[dict]:
    """Ten models (more than the eight the series shows), three agents, calls over
    two days, each run's calls at its own start; one call without a run."""
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    calls = []
    for n in range(30):
        started = now - timedelta(hours=n * 1.7, minutes=7)
        agent = ["alpha", "beta", "gamma"][n % 3]
        run_id = await start(api, project, agent, 0, started_at=started.isoformat())
        call = {"provider": "openai", "model": f"model-{n % 10}", "run_id": run_id,
                "started_at": started.isoformat(), "cost_usd": round(0.01 * (n % 10 + 1), 2),
                "input_tokens": 100 + n, "output_tokens": n}  # fmt: skip
        await ok(api, "/v1/ingest/ai", call, project)
        calls.append({**call, "agent": agent, "at": started})
    loose = {"provider": "openai", "model": "model-0", "cost_usd": 0.5, "input_tokens": 1,
             "started_at": (now - timedelta(minutes=30)).isoformat()}  # fmt: skip
    await ok(api, "/v1/ingest/ai", loose, project)
    calls.append({**loose, "agent": None, "at": now - timedelta(minutes=30), "output_tokens": 0})
    return calls


def cost_of(calls: list[dict], key: str) -> dict[str, float]:
    totals: dict[str, float] = {}
    for call in calls:
        if call[key] is not None:
            totals[call[key]] = totals.get(call[key], 0) + call["cost_usd"]
    return totals


@pytest.mark.parametrize(("group_by", "key"), [("model", "model"), ("agent", "agent")])
async def test_cost_totals_and_series(api, project, priced, group_by, key):
    since = datetime.now(UTC) - timedelta(hours=40)
    inside = [call for call in priced if call["at"] >= since]
    status, body = await read(
        api, project, "/cost", since=since.isoformat(), group_by=group_by, bucket="hour"
    )
    assert status == 200, body
    data = body["data"]
    assert data["group_by"] == group_by and data["bucket"] == "hour"
    want = cost_of(inside, key)
    assert {row["key"]: row["cost_usd"] for row in data["totals"]} == pytest.approx(want)
    costs = [row["cost_usd"] for row in data["totals"]]
    assert costs == sorted(costs, reverse=True)
    first = data["totals"][0]
    mine = [call for call in inside if call[key] == first["key"]]
    assert first["calls"] == len(mine)
    assert first["input_tokens"] == sum(call["input_tokens"] for call in mine)
    assert first["output_tokens"] == sum(call["output_tokens"] for call in mine)
    # The series: at most the top eight keys and other, adding up to the totals.
    top = [row["key"] for row in data["totals"][:8]]
    keys = {point["key"] for point in data["series"]}
    assert keys <= {*top, "other"}
    assert ("other" in keys) == (len(data["totals"]) > 8)
    assert sum(point["cost_usd"] for point in data["series"]) == pytest.approx(sum(want.values()))
    for point in data["series"]:
        start = datetime.fromisoformat(point["bucket_start"])
        assert start.minute == 0 and start.second == 0
        here = [c for c in inside if start <= c["at"] < start + timedelta(hours=1)]
        if point["key"] != "other":
            expected = sum(c["cost_usd"] for c in here if c[key] == point["key"])
            assert point["cost_usd"] == pytest.approx(expected)


async def test_cost_by_day_and_bad_parameters(api, project, priced):
    status, body = await read(api, project, "/cost", window="7d")
    assert status == 200 and body["data"]["bucket"] == "day" and body["data"]["group_by"] == "model"
    days = {point["bucket_start"][:10] for point in body["data"]["series"]}
    assert all(point["bucket_start"].endswith("T00:00:00Z") for point in body["data"]["series"])
    assert len(days) >= 2
    assert sum(row["cost_usd"] for row in body["data"]["totals"]) == pytest.approx(
        sum(call["cost_usd"] for call in priced)
    )
    status, body = await read(api, project, "/cost", window="1h")
    assert status == 200 and body["data"]["bucket"] == "hour"
    for query, field in (({"group_by": "tool"}, "group_by"), ({"bucket": "week"}, "bucket"),
                         ({"window": "400d", "bucket": "hour"}, "bucket")):  # fmt: skip
        status, body = await read(api, project, "/cost", **query)
        assert status == 422 and body["error"]["field"] == field, body
