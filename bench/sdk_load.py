"""The real Python SDK as the client: many concurrent agents in several processes.

    python bench/sdk_load.py [--processes 4] [--agents 50] [--seconds 15]
                             [--modes sdk raw per-agent bare] [--repeat 1]
                             [--json out.json] [--py-spy-client out.txt]

Each mode gets a fresh scratch database on the PostgreSQL at
KEELWAVE_BENCH_DATABASE_URL and a real `keelwave serve` on it (bench/ingest.py's
helpers; its default workers). Then ``--processes`` processes each run
``--agents`` asyncio agents until ``--seconds`` have passed, every agent one run
after another. A run is planned from a seeded random generator, the same way in
every mode: 10-50 tool calls with inputs and outputs of a few hundred bytes
(bench/workloads.py's pool, plus the step's own fields), a model call with its
tokens before about one step in three, a thought now and then, and an ending:
clean (70%), a loop (the agent repeats its last call; 10%), a tool that raises
(10%) or the max_steps guard (10%).

- **sdk**: the agents are written as docs/sdk.md shows: ``async with
  client.run(...)``, tools decorated with ``@client.observe``, ``run.llm_call``,
  ``run.think``, ``stop_on_loop`` and ``max_steps``; one ``Keelwave`` client per
  process, with its defaults (its background sender batches what queued up).
  When the agents are done, ``client.flush()``; the clock stops when every
  process's flush has returned True (the server acknowledges after commit).
- **raw**: the same rows, posted by hand with aiohttp in as many processes,
  batched as the SDK batches at its fullest and with nothing in between: rounds
  of one run per agent, bodies made with json.dumps in the clock, 500 events a
  request, four requests always in flight (the SDK's limits), a round's
  finishes once its run starts are acknowledged.
- **per-agent**: the same rows, each agent posting its own run as it goes (run
  start, steps in arrays of 5-10 with its model calls between, the finish):
  bench/workloads.py's agent-shaped client, with these runs.
- **bare**: the same agents with their tools undecorated, no SDK and no
  server: what the agents cost by themselves (the SDK's own client CPU per
  step is sdk's less this).

``--repeat N`` runs the modes in turn N times (bare once) and reports the
median of the rounds' sdk/raw ratios: on a shared machine each side of a
ratio gets a different share of the CPU, and turns keep them close in time.

Afterwards the database is counted: every step, run, finish (by termination
reason) and model call an agent made must be there, once; the bench fails
loudly otherwise. Reported per mode: committed steps/s from the first send to
the last commit, the ratio of sdk to the raw modes, server and PostgreSQL CPU
per step (bench/workloads.py's measures), the client processes' own CPU per
step (and the agents' thread alone), the SDK's queue at its longest and how it
batched, and the server's memory every second. Agents this fast make events
faster than the server commits them here: the SDK's queue grows through a run
(about 24,000 events a process after 120 s on the shared 2-core machine), and a
run of many minutes would fill it (100,000) and the SDK would drop, and say so.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import multiprocessing
import os
import random
import resource
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
import psycopg

sys.path.insert(0, os.path.dirname(__file__))
from ingest import RssSampler, drop_database, scratch_database, start_server  # noqa: E402
from otlp import _backend_cpu, _tree_cpu  # noqa: E402
from workloads import AGENTS, MODELS, POOL_SIZE, _sentence, tool_pool  # noqa: E402

MODES = ("sdk", "raw", "per-agent", "bare")
ENDINGS = (("clean", 70), ("loop_detected", 10), ("error", 10), ("max_steps_reached", 10))
RAW_BATCH = 500  # the SDK's MAX_BATCH
RAW_IN_FLIGHT = 4  # the SDK's IN_FLIGHT


# -- what an agent does: one plan, whatever sends it -----------------------------------


@dataclass
class Action:
    """One thing the agent does: a model call, a thought, or a tool call."""

    kind: str  # "llm", "think" or "tool"
    tool: str = ""
    given: dict = field(default_factory=dict)
    output: dict = field(default_factory=dict)
    raises: bool = False
    provider: str = ""
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    latency_ms: float = 0.0
    text: str = ""


@dataclass
class Plan:
    agent: str
    task: str
    ending: str
    actions: list[Action]
    max_steps: int | None = None  # the guard, for max_steps_reached


def plan_run(rng: random.Random, pool: list) -> Plan:
    """What one run does, decided up front so every mode sends the same rows."""
    steps = rng.randint(10, 50)
    ending = rng.choices([e for e, _ in ENDINGS], [w for _, w in ENDINGS])[0]
    actions: list[Action] = []
    calls = 0
    for index in range(1, steps + 1):
        if rng.random() < 0.33:
            provider, model = rng.choice(MODELS)
            actions.append(Action("llm", provider=provider, model=model,
                                  input_tokens=rng.randint(200, 4000),
                                  output_tokens=rng.randint(20, 800),
                                  latency_ms=round(rng.uniform(300, 4000), 1)))  # fmt: skip
        if rng.random() < 0.05:
            actions.append(Action("think", text=_sentence(rng, 8, 20)))
            continue
        tool, given, output = pool[rng.randrange(POOL_SIZE)]
        # the same pool entry twice in a run is another call: fields of its own
        given = {**given, "attempt": rng.randint(1, 3), "step": index}
        actions.append(Action("tool", tool=tool, given=given, output=output))
        calls += 1
    plan = Plan(rng.choice(AGENTS), _sentence(rng, 6, 16), ending, actions)
    tools = [a for a in actions if a.kind == "tool"]
    if ending == "loop_detected":  # the agent calls its last tool again, the same way
        last = tools[-1]
        actions.append(Action("tool", tool=last.tool, given=last.given, output=last.output))
    elif ending == "error":
        tools[-1].raises = True
    elif ending == "max_steps_reached":  # the guard stops it 5 steps before its end
        plan.max_steps = sum(1 for a in actions if a.kind != "llm") - 5
    return plan


@dataclass
class Outcome:
    """What a plan leaves recorded: the steps and model calls that happen, and its end."""

    steps: list[tuple[int, Action]]  # (step index, tool call or thought)
    calls: list[tuple[int, Action]]  # (the step index it leads to, model call)
    reason: str
    loop_step_index: int | None = None


def outcome(plan: Plan) -> Outcome:
    """The plan played as the SDK plays it: the max_steps guard stops a step before it
    runs, a tool that raises ends the run, the first repeated call ends it looping."""
    steps: list[tuple[int, Action]] = []
    calls: list[tuple[int, Action]] = []
    seen: dict[tuple[str, str], int] = {}
    index = 0
    for action in plan.actions:
        if action.kind == "llm":
            calls.append((index + 1, action))
            continue
        index += 1
        if plan.max_steps is not None and index > plan.max_steps:
            return Outcome(steps, calls, "max_steps_reached")
        steps.append((index, action))
        if action.kind == "tool":
            if action.raises:
                return Outcome(steps, calls, "error")
            first = seen.setdefault((action.tool, json.dumps(action.given, sort_keys=True)), index)
            if first != index:
                return Outcome(steps, calls, "loop_detected", first)
    return Outcome(steps, calls, "clean")


class ToolFailed(Exception):
    pass


class Counts:
    """What the agents of one process made and had acknowledged: what the database
    must hold at the end."""

    def __init__(self) -> None:
        self.runs = self.steps = self.calls = 0
        self.endings: dict[str, int] = {}
        self.failures: dict[str, int] = {}  # raw modes: requests not answered 200

    def ended(self, reason: str) -> None:
        self.endings[reason] = self.endings.get(reason, 0) + 1


# -- sdk: agents as docs/sdk.md writes them ----------------------------------------------

# What the tool the agent calls next answers (the plan's output, or a failure): one per
# agent, since each agent is an asyncio task with its own context.
_ANSWER: contextvars.ContextVar[tuple[dict, bool]] = contextvars.ContextVar("answer")


def sdk_tools(client, counts: Counts) -> dict:
    """The agents' tools, with real parameters (bound, they become tool_input)."""

    async def answer() -> dict:
        await asyncio.sleep(0)  # a real tool awaits its I/O: the other agents run meanwhile
        output, fails = _ANSWER.get()
        counts.steps += 1  # the tool ran: its step is recorded, as it returns or raises
        if fails:
            raise ToolFailed("upstream returned 503")
        return output

    @client.observe(name="web_search")
    async def web_search(query, max_results, reason, attempt, step):
        return await answer()

    @client.observe(name="read_file")
    async def read_file(path, start_line, end_line, reason, attempt, step):
        return await answer()

    @client.observe(name="run_sql")
    async def run_sql(database, query, attempt, step):
        return await answer()

    @client.observe(name="http_get")
    async def http_get(url, headers, timeout_s, reason, attempt, step):
        return await answer()

    @client.observe(name="lookup_ticket")
    async def lookup_ticket(ticket_id, include_history, fields, reason, attempt, step):
        return await answer()

    return {f.__name__: f for f in (web_search, read_file, run_sql, http_get, lookup_ticket)}


async def sdk_agent(client, tools: dict, plan: Plan, counts: Counts) -> None:
    from keelwave import AgentStopped

    counts.runs += 1
    scope = client.run(plan.agent, input={"task": plan.task}, tags=["bench"],
                       max_steps=plan.max_steps, stop_on_loop=True)  # fmt: skip
    try:
        async with scope as run:
            for action in plan.actions:
                if action.kind == "llm":
                    run.llm_call(action.provider, action.model, input_tokens=action.input_tokens,
                                 output_tokens=action.output_tokens,
                                 latency_ms=action.latency_ms,
                                 step_index=run.step_count + 1)  # fmt: skip
                    counts.calls += 1
                elif action.kind == "think":
                    run.think(action.text)  # guarded by max_steps like a tool call
                    counts.steps += 1
                else:
                    _ANSWER.set((action.output, action.raises))
                    await tools[action.tool](**action.given)
            scope.output = {"answer": plan.task}
    except (AgentStopped, ToolFailed):
        pass  # the run is finished with the reason; a real caller would log it
    counts.ended(scope.run.termination_reason)


class _Unrecorded:
    """Stands in for the client in the bare mode: the tools stay plain functions."""

    def observe(self, name: str):
        return lambda func: func


async def bare_agent(tools: dict, plan: Plan, counts: Counts) -> None:
    """The same agent with no SDK at all: the same tool calls, where the SDK's agent
    would stop (outcome), and nothing recorded: what the agents cost by themselves."""
    played = outcome(plan)
    counts.runs += 1
    counts.calls += len(played.calls)
    for _, action in played.steps:
        if action.kind == "think":
            counts.steps += 1
            continue
        _ANSWER.set((action.output, action.raises))
        try:
            await tools[action.tool](**action.given)
        except ToolFailed:
            break
    counts.ended(played.reason)


async def bare_process(rngs: list, pool: list, deadline: float, counts: Counts) -> None:
    tools = sdk_tools(_Unrecorded(), counts)

    async def agent(rng: random.Random) -> None:
        while time.monotonic() < deadline:
            await bare_agent(tools, plan_run(rng, pool), counts)

    await asyncio.gather(*[agent(rng) for rng in rngs])


async def sdk_process(client, rngs: list, pool: list, deadline: float, counts: Counts) -> int:
    """The agents of one process, until the deadline; the SDK's longest queue seen."""
    tools = sdk_tools(client, counts)
    longest = 0
    done = asyncio.Event()

    async def agent(rng: random.Random) -> None:
        while time.monotonic() < deadline:
            await sdk_agent(client, tools, plan_run(rng, pool), counts)

    async def watch_queue() -> None:
        nonlocal longest
        queued = client._transport._queue  # private: read only, for the report
        while not done.is_set():
            longest = max(longest, len(queued))
            await asyncio.sleep(0.02)

    watcher = asyncio.create_task(watch_queue())
    await asyncio.gather(*[agent(rng) for rng in rngs])
    done.set()
    await watcher
    return longest


# A field each event of a kind has once (in the SDK's compact JSON): events per body.
MARKS = {
    "/v1/ingest/agent/runs": b'"agent_name":',
    "/v1/ingest/agent/steps": b'"step_type":',
    "/v1/ingest/ai": b'"provider":',
    "/v1/ingest/agent/runs/finish": b'"termination_reason":',
}


def count_requests(client) -> dict[str, list[int]]:
    """Wrap the SDK's poster to count its requests and events per path (the report's
    view of how it batches); what it sends is unchanged."""
    poster = client._transport._poster
    post = poster.post
    seen: dict[str, list[int]] = {}

    def counted(path: str, body: bytes):
        entry = seen.setdefault(path, [0, 0])
        entry[0] += 1
        entry[1] += body.count(MARKS[path])
        return post(path, body)

    poster.post = counted
    return seen


# -- raw: the same rows by hand -----------------------------------------------------------


def _iso(when: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if when is None else when, UTC).isoformat()


TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/srv/agent/tools.py", line 88, in call_tool\n    return await tool(**arguments)\n'
    '  File "/srv/agent/http.py", line 41, in fetch\n    raise ToolFailed(status)\n'
    "ToolFailed: upstream returned 503\n"
)


def raw_rows(plan: Plan, run_id: str) -> tuple[dict, list[dict], list[dict], dict, Outcome]:
    """The run start, steps, model calls and finish the SDK would send for ``plan``."""
    played = outcome(plan)
    start = {"id": run_id, "agent_name": plan.agent, "started_at": _iso(), "tags": ["bench"],
             "input": {"task": plan.task}}  # fmt: skip
    steps = []
    for index, action in played.steps:
        step = {"run_id": run_id, "step_index": index, "started_at": _iso()}
        if action.kind == "think":
            step.update(step_type="think", content=action.text)
        else:
            step.update(step_type="tool_call", tool_name=action.tool, tool_input=action.given)
            if action.raises:
                step.update(error="ToolFailed: upstream returned 503", error_traceback=TRACEBACK)
            else:
                step["tool_output"] = action.output
        step["duration_ms"] = 0.05
        steps.append(step)
    calls = []
    for index, action in played.calls:
        latency = action.latency_ms
        began = datetime.now(UTC) - timedelta(milliseconds=latency)
        calls.append({"id": str(uuid.uuid4()), "provider": action.provider,
                      "model": action.model, "input_tokens": action.input_tokens,
                      "output_tokens": action.output_tokens, "cache_read_tokens": 0,
                      "reasoning_tokens": 0, "status": "ok", "started_at": began.isoformat(),
                      "run_id": run_id, "step_index": index,
                      "latency_ms": latency})  # fmt: skip
    finish = {"id": run_id, "termination_reason": played.reason,
              "loop_detected": played.reason == "loop_detected", "ended_at": _iso()}  # fmt: skip
    if played.loop_step_index is not None:
        finish["loop_step_index"] = played.loop_step_index
    if played.reason == "clean":
        finish["output"] = {"answer": plan.task}
    elif played.reason == "error":
        finish.update(error="ToolFailed: upstream returned 503", error_traceback=TRACEBACK)
    else:
        finish["error"] = f"{'LoopDetected' if played.loop_step_index else 'MaxStepsExceeded'}"
    return start, steps, calls, finish, played


PATHS = {"run": "/v1/ingest/agent/runs", "step": "/v1/ingest/agent/steps",
         "ai": "/v1/ingest/ai", "finish": "/v1/ingest/agent/runs/finish"}  # fmt: skip


async def _post(session, base: str, kind: str, rows: list[dict], counts: Counts) -> bool:
    async with session.post(base + PATHS[kind], data=json.dumps(rows).encode()) as response:
        text = await response.read()
        if response.status in (200, 201):
            return True
        what = f"{kind} {response.status} {text[:120]!r}"
        counts.failures[what] = counts.failures.get(what, 0) + 1
        return False


async def raw_process(session, base: str, rngs: list, pool: list, deadline: float,
                      counts: Counts) -> None:  # fmt: skip
    """The same rows as the SDK sends them at its fullest, with nothing in between: 500
    events a request, four requests always in flight, each round's finishes once its
    run starts are in. Rounds are one run per agent, made while the requests are out."""
    # Unbounded, so a sender can always queue a round's finishes; the maker waits instead.
    work: asyncio.Queue = asyncio.Queue()

    async def sender() -> None:
        while (item := await work.get()) is not None:
            kind, rows, then = item
            if await _post(session, base, kind, rows, counts):
                if kind == "run":
                    counts.runs += len(rows)
                    work.put_nowait(then)  # the round's finishes, now that its runs exist
                elif kind == "step":
                    counts.steps += len(rows)
                elif kind == "ai":
                    counts.calls += len(rows)
                else:
                    for reason in then:
                        counts.ended(reason)
            work.task_done()
        work.task_done()

    senders = [asyncio.create_task(sender()) for _ in range(RAW_IN_FLIGHT)]
    while time.monotonic() < deadline:
        starts, steps, calls, finishes, reasons = [], [], [], [], []
        for rng in rngs:
            start, run_steps, run_calls, finish, played = raw_rows(
                plan_run(rng, pool), str(uuid.uuid4())
            )
            starts.append(start)
            steps += run_steps
            calls += run_calls
            finishes.append(finish)
            reasons.append(played.reason)
        work.put_nowait(("run", starts, ("finish", finishes, reasons)))
        for kind, rows in (("step", steps), ("ai", calls)):
            for i in range(0, len(rows), RAW_BATCH):
                work.put_nowait((kind, rows[i : i + RAW_BATCH], None))
        while work.qsize() >= 2 * RAW_IN_FLIGHT:  # enough made: let the senders send it
            await asyncio.sleep(0.001)
    await work.join()  # every request answered, the finishes too
    for _ in senders:
        work.put_nowait(None)
    await asyncio.gather(*senders)


async def per_agent_process(session, base: str, rngs: list, pool: list, deadline: float,
                            counts: Counts) -> None:  # fmt: skip
    """Each agent posts its own run as it goes: steps in arrays of 5-10, each model call
    in a request of its own between them, then the finish."""

    async def agent(rng: random.Random, sizes: random.Random) -> None:
        while time.monotonic() < deadline:
            plan = plan_run(rng, pool)
            start, steps, calls, finish, played = raw_rows(plan, str(uuid.uuid4()))
            if not await _post(session, base, "run", [start], counts):
                continue
            counts.runs += 1
            by_index: dict[int, list[dict]] = {}
            for call in calls:
                by_index.setdefault(call["step_index"], []).append(call)
            pending: list[dict] = []
            size = sizes.randint(5, 10)

            async def post_steps(pending: list[dict] = pending) -> None:
                if pending and await _post(session, base, "step", pending, counts):
                    counts.steps += len(pending)
                pending.clear()

            for step in steps:
                for call in by_index.pop(step["step_index"], []):
                    if await _post(session, base, "ai", [call], counts):
                        counts.calls += 1
                pending.append(step)
                if len(pending) >= size:
                    await post_steps()
                    size = sizes.randint(5, 10)
            await post_steps()
            for rest in by_index.values():  # a call before a step that never came
                for call in rest:
                    if await _post(session, base, "ai", [call], counts):
                        counts.calls += 1
            if await _post(session, base, "finish", [finish], counts):
                counts.ended(played.reason)

    await asyncio.gather(*[agent(rng, random.Random(-n - 1)) for n, rng in enumerate(rngs)])


# -- one client process --------------------------------------------------------------------


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process
    return usage.ru_utime + usage.ru_stime


def _main_thread_cpu() -> float:
    """CPU seconds of this process's main thread alone (the agents' event loop; the
    SDK's sender threads are the rest), from /proc (Linux)."""
    fields = Path(f"/proc/self/task/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def client_process(mode: str, number: int, agents: int, seconds: float, base: str, key: str,
                   barrier, results) -> None:  # fmt: skip
    pool = tool_pool(7)
    rngs = [random.Random(number * 1000 + n) for n in range(agents)]  # the same in every mode
    counts = Counts()
    report: dict = {"mode": mode, "number": number, "pid": os.getpid()}
    if mode == "sdk":
        from keelwave import Keelwave

        client = Keelwave(api_key=key, endpoint=base)
        requests = count_requests(client)
        barrier.wait()
        started, cpu0, main0 = time.time(), _cpu(), _main_thread_cpu()
        deadline = time.monotonic() + seconds
        report["longest_queue"] = asyncio.run(sdk_process(client, rngs, pool, deadline, counts))
        report["agents_done_s"] = time.time() - started
        report["flushed"] = client.flush(timeout=600)
        report["dropped"] = client._transport.dropped
        report["requests"] = requests
        report["agents_cpu_s"] = _main_thread_cpu() - main0
    elif mode == "bare":
        barrier.wait()
        started, cpu0 = time.time(), _cpu()
        asyncio.run(bare_process(rngs, pool, time.monotonic() + seconds, counts))
        report["agents_done_s"] = time.time() - started
    else:
        import aiohttp

        async def run() -> None:
            headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
            limit = RAW_IN_FLIGHT if mode == "raw" else agents
            connector = aiohttp.TCPConnector(limit=limit)
            async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
                deadline = time.monotonic() + seconds
                loop = raw_process if mode == "raw" else per_agent_process
                await loop(session, base, rngs, pool, deadline, counts)

        barrier.wait()
        started, cpu0 = time.time(), _cpu()
        asyncio.run(run())
        report["agents_done_s"] = time.time() - started
    report.update(started=started, ended=time.time(), cpu_s=_cpu() - cpu0, runs=counts.runs,
                  steps=counts.steps, calls=counts.calls, endings=counts.endings,
                  failures=counts.failures)  # fmt: skip
    results.put(report)


# -- one mode, measured ----------------------------------------------------------------------


def stored(conn: psycopg.Connection) -> dict:
    """What the database holds: each step, run and model call once (keys enforce it)."""
    one = conn.execute(
        "SELECT (SELECT count(*) FROM agent_steps), (SELECT count(*) FROM agent_runs),"
        " (SELECT count(*) FROM ai_traces),"
        " (SELECT count(*) FROM ai_traces WHERE run_id IS NOT NULL)"
    ).fetchone()
    endings = dict(conn.execute(
        "SELECT termination_reason, count(*) FROM agent_runs "
        "WHERE termination_reason IS NOT NULL GROUP BY 1"
    ).fetchall())  # fmt: skip
    return {"steps": one[0], "runs": one[1], "calls": one[2], "linked_calls": one[3],
            "endings": endings}  # fmt: skip


def _wait_for(processes: list, results) -> list[dict]:
    import queue

    reports: list[dict] = []
    while len(reports) < len(processes):
        try:
            reports.append(results.get(timeout=1.0))
        except queue.Empty:  # noqa: PERF203 (waiting, not a hot loop)
            dead = [p for p in processes if p.exitcode not in (None, 0)]
            if dead:
                raise SystemExit(
                    f"a client process failed (exit code {dead[0].exitcode})"
                ) from None
    return reports


def _spy(pid: int, path: str, seconds: float) -> subprocess.Popen:
    return subprocess.Popen(
        ["py-spy", "record", "--pid", str(pid), "--rate", "100", "--format", "raw",
         "-o", path, "-d", str(int(seconds) + 1)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def measure_bare(args: argparse.Namespace) -> dict:
    """The agents alone, no SDK and no server: their own CPU per step."""
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(args.processes + 1), context.Queue()
    processes = [
        context.Process(target=client_process, daemon=True,
                        args=("bare", n, args.agents, args.seconds, "", "", barrier, results))
        for n in range(args.processes)
    ]  # fmt: skip
    for process in processes:
        process.start()
    barrier.wait(timeout=120)
    reports = _wait_for(processes, results)
    for process in processes:
        process.join(30)
    steps = max(1, sum(r["steps"] for r in reports))
    elapsed = max(r["ended"] for r in reports) - min(r["started"] for r in reports)
    return {"mode": "bare", "processes": args.processes, "agents": args.agents,
            "server_workers": 0, "steps": steps, "seconds": elapsed, "steps_per_s": steps / elapsed,
            "client_cpu_us_per_step": 1e6 * sum(r["cpu_s"] for r in reports) / steps,
            "lost": []}  # fmt: skip


def measure(mode: str, args: argparse.Namespace) -> dict:
    from workloads import _machine

    if mode == "bare":
        return measure_bare(args)
    name, db_url = scratch_database()
    server, base, key = start_server(db_url, args.workers)
    context = multiprocessing.get_context("spawn")  # nothing of this process in them
    barrier, results = context.Barrier(args.processes + 1), context.Queue()
    processes = [
        context.Process(target=client_process, daemon=True,
                        args=(mode, n, args.agents, args.seconds, base, key, barrier, results))
        for n in range(args.processes)
    ]  # fmt: skip
    spy = None
    try:
        for process in processes:
            process.start()
        workers = len(psutil.Process(server.pid).children(recursive=True)) or 1
        with psycopg.connect(db_url, autocommit=True) as watch:
            barrier.wait(timeout=120)  # every client is ready: go
            server0, backends0, machine0 = _tree_cpu(server.pid), _backend_cpu(watch), _machine()
            if args.py_spy_client and mode == "sdk":
                spy = _spy(processes[0].pid, args.py_spy_client, args.seconds)
            with RssSampler(server.pid) as rss:
                reports = _wait_for(processes, results)
            server1, backends1, machine1 = _tree_cpu(server.pid), _backend_cpu(watch), _machine()
            load_average = os.getloadavg()[0]
            found = stored(watch)
        for process in processes:
            process.join(30)
    finally:
        if spy is not None:
            spy.wait(60)
        server.terminate()
        server.wait()
        drop_database(name)
    made = {"steps": sum(r["steps"] for r in reports), "runs": sum(r["runs"] for r in reports),
            "calls": sum(r["calls"] for r in reports), "endings": {}}  # fmt: skip
    for report in reports:
        for reason, count in report["endings"].items():
            made["endings"][reason] = made["endings"].get(reason, 0) + count
    elapsed = max(r["ended"] for r in reports) - min(r["started"] for r in reports)
    steps = max(1, made["steps"])
    server_cpu = server1 - server0
    backend_cpu = sum(cpu - backends0.get(pid, 0.0) for pid, cpu in backends1.items())
    client_cpu = sum(r["cpu_s"] for r in reports)
    result = {
        "mode": mode,
        "processes": args.processes,
        "agents": args.agents,
        "server_workers": workers,
        "seconds": elapsed,
        "agents_done_s": max(r["agents_done_s"] for r in reports),
        "made": made,
        "stored": found,
        "steps_per_s": made["steps"] / elapsed,
        "runs_per_s": made["runs"] / elapsed,
        "calls_per_s": made["calls"] / elapsed,
        "server_cpu_us_per_step": 1e6 * server_cpu / steps,
        "backend_cpu_us_per_step": 1e6 * backend_cpu / steps,
        "client_cpu_us_per_step": 1e6 * client_cpu / steps,
        "server_cpu_s": server_cpu,
        "backend_cpu_s": backend_cpu,
        "client_cpu_s": client_cpu,
        "machine_busy": (machine1[0] - machine0[0]) / max(1.0, machine1[1] - machine0[1]),
        "others_cores": max(
            0.0,
            (machine1[0] - machine0[0]) / os.sysconf("SC_CLK_TCK")
            - server_cpu
            - backend_cpu
            - client_cpu,
        )
        / elapsed,  # fmt: skip
        "load_average_1min": load_average,
        "rss_mib": rss.samples,
        "failures": {k: v for r in reports for k, v in r["failures"].items()},
    }
    if mode == "sdk":
        result["flushed"] = all(r["flushed"] for r in reports)
        result["dropped"] = sum(r["dropped"] for r in reports)
        result["longest_queue"] = max(r["longest_queue"] for r in reports)
        requests: dict[str, list[int]] = {}
        for report in reports:
            for path, (count, events) in report["requests"].items():
                entry = requests.setdefault(path, [0, 0])
                entry[0] += count
                entry[1] += events
        result["requests"] = requests
        agents_cpu = sum(r["agents_cpu_s"] for r in reports)
        result["agents_cpu_us_per_step"] = 1e6 * agents_cpu / steps
        result["sender_cpu_us_per_step"] = 1e6 * (client_cpu - agents_cpu) / steps
    result["lost"] = losses(result)
    return result


def losses(result: dict) -> list[str]:
    """Every way the database differs from what the agents made (empty: nothing lost)."""
    made, found = result["made"], result["stored"]
    problems = []
    for what in ("steps", "runs", "calls"):
        if found[what] != made[what]:
            problems.append(f"{what}: the agents made {made[what]}, the database holds "
                            f"{found[what]}")  # fmt: skip
    if found["linked_calls"] != found["calls"]:
        problems.append(f"model calls: {found['calls'] - found['linked_calls']} without a run")
    if found["endings"] != made["endings"]:
        problems.append(f"finishes: the agents ended {made['endings']}, the database holds "
                        f"{found['endings']}")  # fmt: skip
    if result["failures"]:
        problems.append(f"requests refused: {result['failures']}")
    if result.get("flushed") is False:
        problems.append("client.flush() returned False")
    if result.get("dropped"):
        problems.append(f"the SDK dropped {result['dropped']} events (its queue was full)")
    return problems


# -- the report -------------------------------------------------------------------------------


def total_cpu_us(result: dict) -> float:
    """All the CPU one committed step cost on this machine: client, server, PostgreSQL."""
    return (result["client_cpu_us_per_step"] + result["server_cpu_us_per_step"]
            + result["backend_cpu_us_per_step"])  # fmt: skip


def ratios(results: list[dict]) -> list[dict]:
    """Per round, sdk against each raw mode measured in that round: committed steps/s,
    and the CPU per step of the raw mode over the sdk's (where a machine with no one
    else on it would take them: CPU-bound, the rates would be in that ratio)."""
    found = []
    for number in sorted({r["round"] for r in results}):
        of_round = {r["mode"]: r for r in results if r["round"] == number}
        sdk = of_round.get("sdk")
        for other in ("raw", "per-agent"):
            if sdk is not None and other in of_round:
                raw = of_round[other]
                found.append({"round": number, "against": other,
                              "steps": sdk["steps_per_s"] / raw["steps_per_s"],
                              "cpu": total_cpu_us(raw) / total_cpu_us(sdk)})  # fmt: skip
    return found


def print_table(results: list[dict]) -> None:
    bare = [r for r in results if r["mode"] == "bare"]
    results = [r for r in results if r["mode"] != "bare"]
    first = results[0] if results else bare[0]
    rounds = len({r["round"] for r in results}) if results else 1
    print(f"python: {sys.executable} ({sys.version.split()[0]}); {os.cpu_count()} cores; "
          f"server workers: {first['server_workers']}; {first['processes']} client processes "
          f"x {first['agents']} asyncio agents, same machine")  # fmt: skip
    print(f"{'mode':<14}{'steps/s':>9}{'runs/s':>8}{'calls/s':>8}{'secs':>6}{'srv us':>8}"
          f"{'pg us':>7}{'client us':>10}{'all us':>8}{'busy':>6}{'load':>6}"
          "  server RSS MiB")  # fmt: skip
    for r in results:
        rss = r["rss_mib"]
        memory = (
            f"{rss[0]:.0f} .. {max(rss):.0f} .. {rss[-1]:.0f} over {len(rss)} s" if rss else "-"
        )
        label = r["mode"] + (f" #{r['round']}" if rounds > 1 else "")
        print(f"{label:<14}{r['steps_per_s']:>9.0f}{r['runs_per_s']:>8.0f}"
              f"{r['calls_per_s']:>8.0f}{r['seconds']:>6.1f}{r['server_cpu_us_per_step']:>8.1f}"
              f"{r['backend_cpu_us_per_step']:>7.1f}{r['client_cpu_us_per_step']:>10.1f}"
              f"{total_cpu_us(r):>8.1f}{r['machine_busy']:>6.0%}{r['load_average_1min']:>6.1f}"
              f"  {memory}")  # fmt: skip
    print("steps/s: steps in the database / seconds from the first send to the last commit "
          "(sdk: every client.flush() returned); srv/pg us: CPU us per step of the server's "
          "processes / its PostgreSQL backends; client us: the client processes' own CPU "
          "(agents, SDK and its sender threads, or the raw sender) per step; all us: the "
          "three together; server RSS: first .. largest .. last sample")  # fmt: skip
    found = ratios(results)
    for other in ("raw", "per-agent"):
        mine = [f for f in found if f["against"] == other]
        if mine:
            steps = statistics.median(f["steps"] for f in mine)
            cpu = statistics.median(f["cpu"] for f in mine)
            each = ", ".join(f"{f['steps']:.2f}" for f in mine)
            print(f"sdk / {other}: steps/s {steps:.2f} (median of {each}); CPU per step, "
                  f"{other} / sdk: {cpu:.2f}")  # fmt: skip
    for sdk in (r for r in results if r["mode"] == "sdk"):
        print(
            f"sdk #{sdk['round']}: client CPU per step {sdk['agents_cpu_us_per_step']:.1f} us "
            f"in the agents' thread, {sdk['sender_cpu_us_per_step']:.1f} us in the SDK's "
            f"sender threads; agents done after {sdk['agents_done_s']:.1f} s of "
            f"{sdk['seconds']:.1f}; longest queue {sdk['longest_queue']} events; requests "
            + ", ".join(
                f"{path.rsplit('/', 1)[-1]} {n} ({events / max(1, n):.0f} events each)"
                for path, (n, events) in sorted(sdk["requests"].items())
            )
        )
    for one in bare:
        line = (f"bare (the same agents, no SDK, no server): {one['steps_per_s']:.0f} steps/s, "
                f"{one['client_cpu_us_per_step']:.1f} us CPU per step")  # fmt: skip
        sdks = [r["client_cpu_us_per_step"] for r in results if r["mode"] == "sdk"]
        if sdks:
            own = statistics.median(sdks) - one["client_cpu_us_per_step"]
            line += f"; the SDK's own client CPU: {own:.1f} us per step"
        print(line)
    for r in results:
        made = r["made"]
        print(f"  {r['mode']}: {made['runs']} runs, {made['steps']} steps, {made['calls']} model "
              f"calls, endings {dict(sorted(made['endings'].items()))}; others on the machine "
              f"{r['others_cores']:.2f} cores")  # fmt: skip
    for r in results:
        if r["lost"]:
            print(f"FAILED, {r['mode']}: not everything the agents made is in the database:")
            for problem in r["lost"]:
                print(f"  {problem}")
        else:
            print(f"{r['mode']}: everything the agents made is in the database, once")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--agents", type=int, default=50, help="asyncio agents per process")
    parser.add_argument("--seconds", type=float, default=15, help="how long agents start runs")
    parser.add_argument("--workers", type=int, default=None, help="server processes")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--repeat", type=int, default=1, help="rounds of the modes in turn")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--py-spy-client", help="profile the first sdk client process "
                        "(py-spy raw) into this file")  # fmt: skip
    args = parser.parse_args()
    results = []
    for number in range(1, args.repeat + 1):  # the modes in turn: side by side, each round
        for mode in args.modes:
            if mode != "bare" or number == 1:  # bare needs no server: once is enough
                results.append({**measure(mode, args), "round": number})
    print_table(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if any(r["lost"] for r in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
