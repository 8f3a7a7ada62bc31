// Events checked where they are made, against the protocol's vocabulary and limits
// (protocol.ts), as the Python SDK's _validate.py does.
//
// The server refuses a whole request for one bad element, and the sender can
// only find it by splitting the request; the developer would hear of it from a
// log line far from its cause. So:
//
// - Wrong in the code itself (a step type or termination reason outside the
//   vocabulary, a name or tags given to observe() or agent()): a RangeError
//   where it is written, naming the option and what it accepts.
// - Wrong in a value that arrives at run time (a tool name built from data, a
//   NaN duration, too many tags): the agent goes on. The one event is dropped
//   (never altered: names are part of fingerprints), or the one field left out
//   when leaving it out means "unknown" (durations, latencies, costs), and each
//   kind of problem is logged once per client.
// - Tags are the one fix-up: a bad tag is left off, the run kept.

import { AMOUNT_MAX, MAX_TAGS, NAME_MAX_LENGTH, STEP_INDEX_MAX, TOKEN_COUNT_MAX } from "./protocol.js";

/** How a run reports a problem: said once per kind. */
export type Report = (kind: string, message: string) => void;

/** Logs each kind of problem once: a bad value in a loop must not flood the log. */
export class Problems {
  private seen = new Set<string>();
  constructor(private log: (message: string) => void = (m) => console.warn(m)) {}

  warn = (kind: string, message: string): void => {
    if (this.seen.has(kind)) return;
    this.seen.add(kind);
    this.log(`keelwave: ${message}`);
  };

  /** Said every time: news, not a repeated problem. */
  say = (message: string): void => this.log(`keelwave: ${message}`);
}

const fallback = new Problems();
export const defaultReport: Report = fallback.warn;

/** A value for a log line, cut short. */
export function shown(value: unknown, limit = 40): string {
  let text: string;
  try {
    text = typeof value === "string" ? JSON.stringify(value) : String(value);
  } catch {
    text = Object.prototype.toString.call(value);
  }
  return text.length <= limit ? text : text.slice(0, limit - 1) + "…";
}

export function kind(field: string, problem: string): string {
  return `${field}: ${problem.replace(/[0-9]+/g, "#")}`;
}

/** Report a bad value once per kind of problem, saying what becomes of its event. */
export function refuse(report: Report, field: string, value: unknown, problem: string, outcome: string): void {
  report(kind(field, problem), `${field}=${shown(value)} ${problem}; ${outcome}`);
}

// -- what is wrong with a value (undefined: nothing) --------------------------

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

export function nameProblem(value: unknown): string | undefined {
  if (typeof value !== "string") return `must be a string, not ${value === null ? "null" : typeof value}`;
  if (!value) return "must not be empty";
  if (value.length > NAME_MAX_LENGTH) {
    const length = [...value].length; // the server counts code points, as Python does
    if (length > NAME_MAX_LENGTH) return `is ${length} characters long; the limit is ${NAME_MAX_LENGTH}`;
  }
  if (value.includes("\u0000")) return "contains a NUL character";
  if (LONE_SURROGATE.test(value)) return "contains a lone surrogate (not valid Unicode text)";
  return undefined;
}

export function amountProblem(value: unknown): string | undefined {
  if (typeof value !== "number") return `must be a number, not ${typeof value}`;
  if (!Number.isFinite(value) || value < 0 || value > AMOUNT_MAX) return `must be a finite number from 0 to ${AMOUNT_MAX}`;
  return undefined;
}

export function tokenProblem(value: unknown): string | undefined {
  if (typeof value !== "number") return `must be an integer, not ${typeof value}`;
  if (!Number.isInteger(value)) return "must be a whole number";
  if (value < 0 || value > TOKEN_COUNT_MAX) return `must be from 0 to ${TOKEN_COUNT_MAX}`;
  return undefined;
}

export function stepIndexProblem(value: unknown): string | undefined {
  if (typeof value !== "number" || !Number.isInteger(value)) return "must be an integer";
  if (value < 0 || value > STEP_INDEX_MAX) return `must be from 0 to ${STEP_INDEX_MAX}`;
  return undefined;
}

const UUID = /^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$/i;

/** `value` as a canonical (lowercase, hyphenated) UUID, or undefined. */
export function asUuid(value: string): string | undefined {
  if (!UUID.test(value)) return undefined;
  const hex = value.replace(/-/g, "").toLowerCase();
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

// -- wrong in the code: throw -------------------------------------------------

export function vocabulary<T extends string>(value: unknown, accepted: readonly T[], option: string): T {
  if (!accepted.includes(value as T)) throw new RangeError(`${option} must be one of ${accepted.join(", ")}, not ${shown(value)}`);
  return value as T;
}

export function checkName(value: unknown, option: string): string {
  const problem = nameProblem(value);
  if (problem !== undefined) throw new RangeError(`${option} ${shown(value)} ${problem}`);
  return value as string;
}

export function checkTags(values: unknown[] | undefined, option = "tags"): void {
  if (values === undefined) return;
  if (values.length > MAX_TAGS) throw new RangeError(`${option}: ${values.length} tags; the limit is ${MAX_TAGS}`);
  for (const value of values) {
    const problem = nameProblem(value);
    if (problem !== undefined) throw new RangeError(`${option}: the tag ${shown(value)} ${problem}`);
  }
}

// -- wrong in a value at run time: report, and drop or leave out ---------------

/** The tags that can be stored: bad ones and those beyond MAX_TAGS are left off. */
export function cleanTags(values: unknown[] | undefined, report: Report): string[] | undefined {
  if (!values?.length) return undefined;
  const kept: string[] = [];
  for (const value of values) {
    const problem = nameProblem(value);
    if (problem === undefined) kept.push(value as string);
    else report(kind("tag", problem), `tags: the tag ${shown(value)} ${problem}; it is left off the run`);
  }
  if (kept.length > MAX_TAGS) {
    report("tags", `tags: a run has ${kept.length} tags; the limit is ${MAX_TAGS}, so only the first ${MAX_TAGS} are kept`);
    kept.length = MAX_TAGS;
  }
  return kept.length ? kept : undefined;
}

/** `value`, or undefined (the field left out) when the server could not store it. */
export function optionalAmount(value: unknown, field: string, what: string, report: Report): number | undefined {
  if (value === undefined || value === null) return undefined;
  const problem = amountProblem(value);
  if (problem === undefined) return value as number;
  refuse(report, field, value, problem, `the ${what} is sent without it`);
  return undefined;
}

/** Free text without lone surrogates, which the server's JSON parser refuses. */
export function freeText(text: string): string {
  return LONE_SURROGATE.test(text) ? text.replace(new RegExp(LONE_SURROGATE, "g"), "\ufffd") : text;
}
