"""Nothing lost, nothing doubled: what the Python SDK does with an event the server
would refuse, with a batch the server refuses, and with a key it refuses.

Against a real `keelwave serve` and its database: what counts is what is stored.
"""

from __future__ import annotations

import logging
import math

import pytest
from conftest import make_project, query
from serve_process import ServeProcess

from keelwave import Keelwave
from keelwave.protocol import MAX_TAGS, NAME_MAX_LENGTH


@pytest.fixture
def keys(db_url: str):
    return make_project(db_url)


@pytest.fixture
def client(server: ServeProcess, keys) -> Keelwave:
    sdk = Keelwave(api_key=keys.keys["ingest"], endpoint=server.url, flush_at_exit=False)
    yield sdk
    sdk.shutdown()


def count(db_url: str, table: str, project_id: str) -> int:
    return query(db_url, f"SELECT count(*) FROM {table} WHERE project_id = %s", (project_id,))[0][0]


def warnings_about(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def problems_with(caplog: pytest.LogCaptureFixture, field: str) -> list[str]:
    """The log lines about ``field``: they start with its name."""
    return [
        r.getMessage() for r in caplog.records if r.getMessage().startswith(f"keelwave: {field}")
    ]


# -- wrong from the start: refused where it is written ---------------------------


def test_a_wrong_step_type_is_refused_at_decoration(client: Keelwave) -> None:
    # The example: "tool" is not a step type. Without this, 0 of 201 steps arrived.
    with pytest.raises(ValueError, match="step_type") as refused:

        @client.observe(step_type="tool")
        def search(q: str) -> str:
            return q

    for accepted in ("tool_call", "llm_call", "think", "replan", "custom"):
        assert accepted in str(refused.value)
    with pytest.raises(ValueError, match="step_type"):
        get_run = client.start_run("by-hand")
        get_run.tool_call("search", input={}, step_type="tool")


def test_wrong_names_and_tags_in_decorators_are_refused_at_decoration(client: Keelwave) -> None:
    with pytest.raises(ValueError, match="name"):
        client.observe(name="x" * (NAME_MAX_LENGTH + 1))(lambda: None)
    with pytest.raises(ValueError, match="name"):
        client.observe(name="bad\x00name")(lambda: None)
    with pytest.raises(ValueError, match="name"):
        client.agent(name="")(lambda: None)  # an empty name is refused, not defaulted
    with pytest.raises(ValueError, match="tags"):
        client.agent(tags=[f"t{i}" for i in range(MAX_TAGS + 1)])(lambda: None)
    with pytest.raises(ValueError, match="tags"):
        client.agent(tags=["ok", ""])(lambda: None)


def test_a_wrong_termination_reason_is_refused(client: Keelwave) -> None:
    run = client.start_run("by-hand")
    with pytest.raises(ValueError, match="termination_reason.*clean"):
        run.finish("done")


# -- wrong at run time: the agent goes on, only the bad event is lost -------------


def test_bad_values_at_run_time_drop_only_their_event(
    server, keys, db_url: str, client: Keelwave, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="keelwave")
    tags = ["kept", "bad\x00tag", "y" * (NAME_MAX_LENGTH + 1)] + [f"t{i}" for i in range(80)]
    with client.run("runtime-values", tags=tags) as run:
        run.tool_call("fine", input={"i": 1})
        for i in range(3):  # the same problem three times: one warning
            run.tool_call("n" * (NAME_MAX_LENGTH + 1), input={"i": i})
        run.tool_call("no-duration", input={}, duration_ms=math.nan)
        run.tool_call("timed", input={}, duration_ms=12.5)
        run.llm_call("openai", "gpt-4o-mini", input_tokens=10, output_tokens=2)
        run.llm_call("openai", "gpt-4o-mini", input_tokens=-5)  # dropped
        run.llm_call("openai", "", input_tokens=1)  # dropped
        run.llm_call("openai", "gpt-4o-mini", input_tokens=3, cost_usd=math.inf)  # no cost
    assert client.flush()

    [stored] = query(
        db_url,
        "SELECT tags, termination_reason FROM agent_runs WHERE id = %s",
        (run.id,),
    )
    assert stored[1] == "clean"
    assert len(stored[0]) == MAX_TAGS and stored[0][0] == "kept"
    assert all(tag.startswith(("kept", "t")) for tag in stored[0])
    steps = query(
        db_url,
        "SELECT tool_name, duration_ms FROM agent_steps WHERE run_id = %s ORDER BY step_index",
        (run.id,),
    )
    assert steps == [("fine", None), ("no-duration", None), ("timed", 12.5)]
    calls = query(
        db_url,
        "SELECT input_tokens, cost_usd IS NOT NULL FROM ai_traces WHERE run_id = %s "
        "ORDER BY input_tokens",
        (run.id,),
    )
    assert [tokens for tokens, _ in calls] == [3, 10]
    # Each kind of problem said once, naming the value's field and what is wrong with it.
    assert len(problems_with(caplog, "tool_name")) == 1
    assert "256" in problems_with(caplog, "tool_name")[0]
    assert len(problems_with(caplog, "duration_ms")) == 1
    assert len(problems_with(caplog, "input_tokens")) == 1
    assert len(problems_with(caplog, "model")) == 1
    assert len(problems_with(caplog, "cost_usd")) == 1
    assert problems_with(caplog, "tags")


def test_a_run_with_a_bad_name_or_id_is_not_recorded_and_the_agent_goes_on(
    server, keys, db_url: str, client: Keelwave, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="keelwave")

    @client.observe()
    def tool(i: int) -> int:
        return i

    with client.run("a" * (NAME_MAX_LENGTH + 1)) as run:
        assert tool(1) == 1
    with client.run("job", run_id="job-42") as other:
        assert tool(2) == 2
    with client.run("good") as good:
        tool(3)
    assert client.flush()
    assert run.finished and other.finished
    assert count(db_url, "agent_runs", keys.id) == 1
    assert query(db_url, "SELECT count(*) FROM agent_steps WHERE run_id = %s", (good.id,)) == [(1,)]
    assert count(db_url, "agent_steps", keys.id) == 1
    assert len(problems_with(caplog, "agent_name")) == 1
    assert len(warnings_about(caplog, "job-42")) == 1


# -- refused by the server all the same: split, resend, lose only the bad ones ------


def test_one_refused_event_loses_only_itself(
    server, keys, db_url: str, client: Keelwave, caplog: pytest.LogCaptureFixture
) -> None:
    """A tool input the server cannot store (a lone surrogate, as os.fsdecode makes for
    a file name that is not UTF-8) is refused with its whole request: the SDK splits."""
    caplog.set_level(logging.WARNING, logger="keelwave")

    @client.observe()
    def read_file(path: str) -> str:
        return "contents"

    ids = []
    for r in range(20):
        with client.run("reader") as run:
            ids.append(run.id)
            for i in range(10 if r else 11):
                read_file(f"file-{i}\udcff.txt" if (r, i) in ((7, 3), (12, 5)) else f"f{i}")
    flushed = client.flush(timeout=30)
    assert count(db_url, "agent_steps", keys.id) == 201 - 2
    assert flushed is False  # two steps were refused: not everything recorded is stored
    assert count(db_url, "agent_runs", keys.id) == 20
    finished = query(
        db_url,
        "SELECT count(*) FROM agent_runs WHERE project_id = %s AND termination_reason = 'clean'",
        (keys.id,),
    )
    assert finished == [(20,)]
    refused = warnings_about(caplog, "refused")
    assert len(refused) == 1, refused  # one kind of problem, one line
    assert "422" in refused[0] and "surrogate" in refused[0]  # the server's own words


@pytest.fixture(scope="module")
def small_server(db_url: str, tmp_path_factory):
    """A server that takes request bodies of up to 64 KiB only."""
    process = ServeProcess(
        "--database-url",
        db_url,
        env={"KEELWAVE_MAX_BODY_BYTES": str(64 * 1024)},
        log=tmp_path_factory.mktemp("small") / "serve.log",
    )
    yield process
    process.stop()
    process.kill()


def test_a_batch_too_large_for_the_server_is_split(
    small_server: ServeProcess, keys, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="keelwave")
    sdk = Keelwave(api_key=keys.keys["ingest"], endpoint=small_server.url, flush_at_exit=False)
    try:
        with sdk.run("bulky") as run:
            for i in range(300):  # 1 KB each: 300 KB in all, over the 64 KiB limit
                run.tool_call("write", input={"i": i, "text": "x" * 1000})
            run.tool_call("write", input={"text": "y" * 100_000})  # too large on its own
            run.tool_call("write", input={"i": "last"})
        flushed = sdk.flush(timeout=60)
    finally:
        sdk.shutdown()
    steps = query(db_url, "SELECT step_index FROM agent_steps WHERE run_id = %s", (run.id,))
    assert sorted(index for (index,) in steps) == [*range(1, 301), 302]
    assert flushed is False  # the one too large was lost
    refused = warnings_about(caplog, "refused")
    assert len(refused) == 1 and "413" in refused[0]


# -- a refused key ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("which", "status", "words"),
    [
        ("unknown", "401", "unknown API key"),
        ("revoked", "401", "revoked"),
        ("read", "403", "scope 'read'"),
    ],
)
def test_a_refused_key_makes_flush_false_and_is_said_once(
    server, keys, db_url: str, caplog: pytest.LogCaptureFixture, which, status, words
) -> None:
    import psycopg

    from keelwave.db import keys as key_store

    caplog.set_level(logging.WARNING, logger="keelwave")
    if which == "unknown":
        api_key = "kw_" + "z" * 43
    elif which == "read":
        api_key = keys.keys["read"]
    else:
        with psycopg.connect(db_url, autocommit=True) as conn:
            created = key_store.create_key(conn, keys.name, "ingest")
            key_store.revoke_key(conn, created.id)
        api_key = created.key
    sdk = Keelwave(api_key=api_key, endpoint=server.url, flush_at_exit=False)
    try:
        for _ in range(3):
            with sdk.run("refused") as run:
                run.tool_call("t", input={})
            assert sdk.flush(timeout=30) is False
    finally:
        sdk.shutdown()
    said = warnings_about(caplog, "refused the API key")
    assert len(said) == 1, said
    assert status in said[0] and words in said[0]
    assert count(db_url, "agent_runs", keys.id) == 0
