// The wire protocol's fixed vocabulary and limits: a copy of keelwave/protocol.py,
// which the server's request schemas are built from. tests/test_typescript_sdk.py
// compares every constant (and the set of names) with the Python module, so a
// constant added or changed on one side alone fails the tests.

/** How a run ended. Exactly these six; anything else is a 4xx. */
export const TERMINATION_REASONS = ["clean", "max_steps_reached", "context_limit", "error", "loop_detected", "timeout"] as const;
export type TerminationReason = (typeof TERMINATION_REASONS)[number];

/** What a step is. Only steps with a tool_name are fingerprinted, whatever their type. */
export const STEP_TYPES = ["tool_call", "llm_call", "think", "replan", "custom"] as const;
export type StepType = (typeof STEP_TYPES)[number];
export const DEFAULT_STEP_TYPE = "tool_call" satisfies StepType;

/** How a model call went. */
export const CALL_STATUSES = ["ok", "error"] as const;
export type CallStatus = (typeof CALL_STATUSES)[number];

/** Names that identify something (agents, tools, providers, models, tags): 1 to NAME_MAX_LENGTH characters, never NUL. */
export const NAME_MAX_LENGTH = 256;
/** Tags on one run. */
export const MAX_TAGS = 64;
/** Step indices are PostgreSQL integers; the SDKs count from 1. */
export const STEP_INDEX_MAX = 2 ** 31 - 1;
/** Token counts: integers a JavaScript number holds exactly. */
export const TOKEN_COUNT_MAX = 2 ** 53;
/** Costs and durations (cost_usd, duration_ms, latency_ms): finite, 0 to AMOUNT_MAX. */
export const AMOUNT_MAX = 1e15;
/** The default largest request body the server accepts (KEELWAVE_MAX_BODY_BYTES). */
export const DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024;
/** Tracebacks (error_traceback): the SDKs send the last TRACEBACK_SENT_MAX characters of one (boundTraceback), the server keeps the last TRACEBACK_STORED_MAX. */
export const TRACEBACK_SENT_MAX = 8 * 1024;
export const TRACEBACK_STORED_MAX = 16 * 1024;
