"""The ingest API: what SDKs send. Every write is acknowledged only once committed.

Runs, steps and model calls go through the group-commit writer; finishing a
run is a single UPDATE. Each handler decodes and validates the whole body
before anything is buffered, so one bad element rejects its request and
never reaches (or poisons) a shared batch.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from aiohttp import web

from keelwave.protocol import TRACEBACK_STORED_MAX, bound_traceback
from keelwave.server.findings.sketch import stored_sketch
from keelwave.server.http import appkeys, params
from keelwave.server.http.auth import INGEST, Principal
from keelwave.server.http.errors import ApiError, not_found, refused, unavailable
from keelwave.server.http.operations import ApiRoutes
from keelwave.server.http.responses import json_response
from keelwave.server.ingest.fingerprint import fingerprint
from keelwave.server.ingest.pricing import PriceTable
from keelwave.server.ingest.schemas import (
    CallsAccepted,
    CallsAcceptedResponse,
    ModelCall,
    RunFinish,
    RunFinished,
    RunFinishedResponse,
    RunFinishItem,
    RunsFinished,
    RunsFinishedResponse,
    RunsStarted,
    RunsStartedResponse,
    RunStart,
    RunStarted,
    RunStartedResponse,
    Step,
    StepsAccepted,
    StepsAcceptedResponse,
    TimestampOutOfRange,
    check_name,
    clean_text,
    decode,
    payload,
    payload_as_sent,
    timestamp,
)
from keelwave.server.redaction import ServerRedaction
from keelwave.server.store.lifecycle import Finish, finish_row, finish_runs
from keelwave.server.store.writer import (
    DatabaseRefused,
    DatabaseUnavailable,
    Overloaded,
    RowsRejected,
    WriterClosed,
)

routes = ApiRoutes("ingest")

# What each route decodes its body as: one name, so the API document (from the
# route's declared body) and the decoding cannot differ. Bodies may be one object
# or an array of them.
RUNS_BODY = RunStart | list[RunStart]
FINISHES_BODY = RunFinishItem | list[RunFinishItem]
STEPS_BODY = Step | list[Step]
CALLS_BODY = ModelCall | list[ModelCall]

# Ingest's own resource: the price table that costs model calls sent without a cost.
PRICES = web.AppKey("prices", PriceTable)


async def _body(request: web.Request) -> bytes:
    body = await request.read()  # raises 413 beyond client_max_size
    if not body.strip():
        raise ApiError(400, "malformed_json", "request body is empty; send a JSON object")
    return body


async def write_rows(request: web.Request, **rows: list[tuple]) -> list[bool]:
    """Hand rows to the group-commit writer and wait for their commit; what it returns
    (for finishes, whether each found its run)."""
    settings = request.app[appkeys.SETTINGS]
    try:
        return await request.app[appkeys.WRITER].write(**rows)
    except (DatabaseUnavailable, WriterClosed):
        raise unavailable(settings.retry_after_seconds) from None
    except DatabaseRefused as error:
        raise refused(str(error)) from None
    except Overloaded:
        raise ApiError(
            503,
            "overloaded",
            "the server is catching up with its write buffer; retry shortly",
            headers={"Retry-After": str(settings.retry_after_seconds)},
        ) from None
    except RowsRejected as error:
        raise ApiError(422, "rejected", f"the database rejected this data: {error}") from None


def retention_cutoff(principal: Principal, now: datetime) -> datetime | None:
    """Steps and model calls that started before this are past the project's retention
    when they arrive (an agent resuming a run that retention already deleted): they are
    accepted and not stored. Stored, they would belong to no run the enforcer deletes,
    and it sweeps such rows only from where its last round stopped (store/retention.py),
    so they would stay for good. Runs are stored whatever their age: the enforcer finds
    them, and their finish must not be a 404."""
    if principal.retention_days is None:
        return None
    return now - timedelta(days=principal.retention_days)


def _as_list(decoded: object) -> tuple[list, bool]:
    """Bodies may be one object or an array of them; remember which for field paths."""
    if isinstance(decoded, list):
        return decoded, True
    return [decoded], False


def _path(is_array: bool, position: int, field: str) -> str:
    return f"[{position}].{field}" if is_array else field


def _started_at(value: datetime | None, now: datetime, is_array: bool, position: int) -> datetime:
    """:func:`timestamp` of an element's ``started_at``; one out of range is a 422 naming
    it (its path is only put together then: this runs for every element)."""
    try:
        return timestamp(value, now)
    except TimestampOutOfRange as error:
        raise error.at(_path(is_array, position, "started_at")) from None


@routes.post(
    "/v1/ingest/agent/runs",
    summary="Start a run",
    body=RUNS_BODY,
    response=(RunStartedResponse, RunsStartedResponse),
    status=201,
)
async def start_run(request: web.Request) -> web.Response:
    """One run (answered with its id), or an array of runs (an SDK batching starts)."""
    principal = await request.app[appkeys.KEYSTORE].authenticate(request, INGEST)
    runs, is_array = _as_list(decode(await _body(request), RUNS_BODY))
    rules = principal.redaction
    now = datetime.now(UTC)
    rows, ids = [], []
    for position, run in enumerate(runs):
        check_name(run.agent_name, "agent_name", position if is_array else None)
        for number, tag in enumerate(run.tags):
            check_name(tag, f"tags[{number}]", position if is_array else None)
        run_id = run.id or uuid.uuid4()
        ids.append(run_id)
        started = _started_at(run.started_at, now, is_array, position)
        rows.append(
            (
                principal.project_uuid,
                run_id,
                run.agent_name,
                run.parent_run_id,
                started,
                rules.json_payload(payload_as_sent(run.input)),
                rules.json_payload(payload_as_sent(run.metadata)),
                run.tags,
            )
        )
    await write_rows(request, runs=rows)
    if is_array:
        return json_response(RunsStartedResponse(RunsStarted(len(ids), ids)), status=201)
    return json_response(RunStartedResponse(RunStarted(ids[0])), status=201)


def _finish_of(body: RunFinish, now: datetime, rules: ServerRedaction, field: str) -> Finish:
    try:
        ended = timestamp(body.ended_at, now)
    except TimestampOutOfRange as error:
        raise error.at(field) from None
    return Finish(
        termination_reason=body.termination_reason,
        ended_at=ended,
        loop_detected=body.loop_detected,
        loop_step_index=body.loop_step_index,
        output=rules.json_text(payload(body.output)),
        error=rules.text(clean_text(body.error)),
        error_traceback=stored_traceback(body.error_traceback, rules),
    )


async def _finish(
    request: web.Request, principal: Principal, finishes: list[tuple[uuid.UUID, Finish]]
) -> list[uuid.UUID]:
    """Finish runs, committed before this returns; return the ids that are not runs of
    the key's project. Finishes go through the group-commit writer, with the steps
    and model calls of other requests, unless its lanes cannot take them (Citus)."""
    if not request.app[appkeys.WRITER].finishes_runs:
        return await finish_runs(request.app[appkeys.POOL], principal.project_id, finishes)
    rows = [finish_row(principal.project_uuid, run_id, finish) for run_id, finish in finishes]
    found = await write_rows(request, finishes=rows)
    unknown = (run_id for (run_id, _), ok in zip(finishes, found, strict=True) if not ok)
    return list(dict.fromkeys(unknown))


def stored_traceback(text: str | None, rules: ServerRedaction) -> str | None:
    """A traceback as it is kept: its last TRACEBACK_STORED_MAX characters, redacted like
    an error. The redaction reads a few times that much first (cut at a line, as the
    final cut is), so a huge one costs no more than a large one."""
    if text is None:
        return None
    text = bound_traceback(clean_text(text), 4 * TRACEBACK_STORED_MAX)
    return bound_traceback(rules.text(text), TRACEBACK_STORED_MAX)


@routes.post(
    "/v1/ingest/agent/runs/finish",
    summary="Finish several runs",
    body=FINISHES_BODY,
    response=RunsFinishedResponse,
)
async def finish_many(request: web.Request) -> web.Response:
    """Finish several runs at once (an SDK batching finishes); unknown runs are listed."""
    principal = await request.app[appkeys.KEYSTORE].authenticate(request, INGEST)
    items, is_array = _as_list(decode(await _body(request), FINISHES_BODY))
    now = datetime.now(UTC)
    finishes = [
        (item.id, _finish_of(item, now, principal.redaction, _path(is_array, n, "ended_at")))
        for n, item in enumerate(items)
    ]
    unknown = await _finish(request, principal, finishes)
    return json_response(RunsFinishedResponse(RunsFinished(len(finishes) - len(unknown), unknown)))


@routes.post(
    "/v1/ingest/agent/runs/{run_id}/finish",
    summary="Finish a run",
    body=RunFinish,
    response=RunFinishedResponse,
)
async def finish(request: web.Request) -> web.Response:
    """Finish (or finish again) one run; 404 if it is not a run of the key's project."""
    principal = await request.app[appkeys.KEYSTORE].authenticate(request, INGEST)
    run_id = params.run_id_of(request)
    body: RunFinish = decode(await _body(request), RunFinish)
    finish = _finish_of(body, datetime.now(UTC), principal.redaction, "ended_at")
    if await _finish(request, principal, [(run_id, finish)]):
        raise not_found(f"run {run_id}")
    return json_response(RunFinishedResponse(RunFinished(run_id, body.termination_reason)))


@routes.post(
    "/v1/ingest/agent/steps",
    summary="Send steps",
    body=STEPS_BODY,
    response=StepsAcceptedResponse,
)
async def ingest_steps(request: web.Request) -> web.Response:
    """One step or an array of them, fingerprinted before they are stored."""
    principal = await request.app[appkeys.KEYSTORE].authenticate(request, INGEST)
    steps, is_array = _as_list(decode(await _body(request), STEPS_BODY))
    rules = principal.redaction
    now = datetime.now(UTC)
    expired = retention_cutoff(principal, now)
    seen: set[tuple[int, int]] = set()  # (run id as UUID.int: hashed in C, step_index)
    # Stored redacted; fingerprinted as sent (server/redaction.py), sketched as stored.
    sent = [payload_as_sent(step.tool_input) for step in steps]
    sent += [payload_as_sent(step.tool_output) for step in steps]
    stored = rules.json_payloads(sent)
    rows = []
    for position, step in enumerate(steps):
        check_name(step.tool_name, "tool_name", position if is_array else None)
        identity = (step.run_id.int, step.step_index)
        if identity in seen:
            field = _path(is_array, position, "step_index")
            raise ApiError(
                422,
                "validation_error",
                f"{field}: step_index {step.step_index} of run {step.run_id} appears twice "
                "in this request",
                field,
            )
        seen.add(identity)
        started = _started_at(step.started_at, now, is_array, position)
        if expired is not None and started < expired:
            continue  # past the project's retention: see retention_cutoff
        stored_input = stored[position]
        rows.append(
            (
                principal.project_uuid,
                step.run_id,
                step.step_index,
                step.step_type,
                step.tool_name,
                stored_input,
                stored[len(steps) + position],
                rules.text(clean_text(step.content)),
                fingerprint(step.tool_name, step.tool_input),
                started,
                step.duration_ms,
                rules.text(clean_text(step.error)),
                stored_traceback(step.error_traceback, rules),
                stored_sketch(step.tool_name, stored_input),
            )
        )
    await write_rows(request, steps=rows)
    return json_response(StepsAcceptedResponse(StepsAccepted(len(steps))))


@routes.post(
    "/v1/ingest/ai",
    summary="Send model calls",
    body=CALLS_BODY,
    response=CallsAcceptedResponse,
)
async def ingest_model_calls(request: web.Request) -> web.Response:
    """One model call or an array of them; each is priced unless it says its cost."""
    principal = await request.app[appkeys.KEYSTORE].authenticate(request, INGEST)
    calls, is_array = _as_list(decode(await _body(request), CALLS_BODY))
    rules = principal.redaction
    now = datetime.now(UTC)
    prices = request.app[PRICES]
    expired = retention_cutoff(principal, now)
    rows = []
    ids = []
    for position, call in enumerate(calls):
        check_name(call.provider, "provider", position if is_array else None)
        check_name(call.model, "model", position if is_array else None)
        call_id = call.id or uuid.uuid4()
        ids.append(call_id)
        started = _started_at(call.started_at, now, is_array, position)
        if expired is not None and started < expired:
            continue  # past the project's retention: see retention_cutoff
        rows.append(
            (
                principal.project_uuid,
                call_id,
                call.run_id,
                call.step_index,
                call.provider,
                call.model,
                call.input_tokens,
                call.output_tokens,
                call.cache_read_tokens,
                call.reasoning_tokens,
                call.cost_usd
                if call.cost_usd is not None
                else prices.cost(
                    call.model,
                    call.input_tokens,
                    call.output_tokens,
                    call.cache_read_tokens,
                    call.reasoning_tokens,
                ),
                call.latency_ms,
                call.status,
                rules.text(clean_text(call.error)),
                started,
                rules.json_payload(payload_as_sent(call.input_messages)),
                rules.json_payload(payload_as_sent(call.output_messages)),
            )
        )
    await write_rows(request, traces=rows)
    return json_response(CallsAcceptedResponse(CallsAccepted(len(ids), ids)))
