"""The Python SDK in forked processes: what a child records arrives, as a pre-fork
server (gunicorn, Celery prefork) or a ``fork`` multiprocessing pool would have it.

A real ``os.fork()`` and a real ``multiprocessing`` pool, against a real
`keelwave serve`; the database is asked what arrived.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import uuid

import pytest
from conftest import make_project, query
from serve_process import ServeProcess

from keelwave import Keelwave

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="no fork on Windows")

# The pool's workers record with the client their parent made before forking them.
_CLIENT: Keelwave | None = None


@pytest.fixture
def keys(db_url: str):
    return make_project(db_url)


def steps_of(db_url: str, run_id: str) -> list[int]:
    rows = query(
        db_url, "SELECT step_index FROM agent_steps WHERE run_id = %s ORDER BY 1", (run_id,)
    )
    return [index for (index,) in rows]


def test_a_forked_child_sends_what_it_records(server: ServeProcess, keys, db_url: str) -> None:
    sdk = Keelwave(api_key=keys.keys["ingest"], endpoint=server.url, flush_at_exit=False)
    try:
        with sdk.run("before-fork") as before:
            for i in range(20):
                before.tool_call("parent", input={"i": i})
        child_run = str(uuid.uuid4())
        pid = os.fork()
        if pid == 0:  # the child: record, flush, and say whether it was all sent
            code = 3
            try:
                with sdk.run("in-child", run_id=child_run) as run:
                    for i in range(25):
                        run.tool_call("child", input={"i": i})
                code = 0 if sdk.flush(timeout=20) else 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        with sdk.run("after-fork") as after:
            after.tool_call("parent", input={})
        assert sdk.flush(timeout=20)
    finally:
        sdk.shutdown()
    assert os.waitstatus_to_exitcode(status) == 0  # the child's flush saw its events stored
    assert steps_of(db_url, child_run) == list(range(1, 26))
    assert steps_of(db_url, before.id) == list(range(1, 21))
    assert steps_of(db_url, after.id) == [1]
    rows = query(
        db_url,
        "SELECT agent_name, termination_reason FROM agent_runs WHERE project_id = %s ORDER BY 1",
        (keys.id,),
    )
    assert rows == [("after-fork", "clean"), ("before-fork", "clean"), ("in-child", "clean")]


def _record_a_run(number: int) -> str:
    """One task of a pool worker: a run with five steps and a model call."""
    assert _CLIENT is not None
    with _CLIENT.run("pool-task", input={"n": number}) as run:
        for i in range(5):
            run.tool_call("work", input={"n": number, "i": i})
        run.llm_call("openai", "gpt-4o-mini", input_tokens=10, output_tokens=1)
    return run.id


def test_fork_pool_workers_record_every_run(server: ServeProcess, keys, db_url: str) -> None:
    global _CLIENT
    _CLIENT = Keelwave(api_key=keys.keys["ingest"], endpoint=server.url, flush_at_exit=False)
    try:
        pool = multiprocessing.get_context("fork").Pool(3)
        try:
            ids = pool.map(_record_a_run, range(12), chunksize=1)
        finally:
            pool.close()  # the workers finish their tasks and exit
            pool.join()
        assert len(set(ids)) == 12
    finally:
        _CLIENT.shutdown()
        _CLIENT = None

    def total(table: str) -> int:
        sql = f"SELECT count(*) FROM {table} WHERE project_id = %s"
        return query(db_url, sql, (keys.id,))[0][0]

    assert total("agent_runs") == 12
    assert total("agent_steps") == 60
    assert total("ai_traces") == 12
    finished = query(
        db_url,
        "SELECT count(*) FROM agent_runs WHERE project_id = %s AND termination_reason = 'clean'",
        (keys.id,),
    )
    assert finished == [(12,)]
