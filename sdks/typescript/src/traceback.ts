// A traceback as the SDKs send it: its end, from a line's start, after a line that
// says how much was cut. The same cut as keelwave/protocol.py's bound_traceback, so
// a trace reads alike from either SDK.
import { TRACEBACK_SENT_MAX } from "./protocol.js";

// Room kept for the marker line "… (N earlier characters cut)".
const MARKER_ROOM = 64;

/** `text` if it has at most `limit` characters; else its end, from the first line that fits. */
export function boundTraceback(text: string, limit: number = TRACEBACK_SENT_MAX): string {
  if (text.length <= limit) return text;
  let tail = text.slice(text.length - (limit - MARKER_ROOM));
  const newline = tail.indexOf("\n");
  if (newline >= 0 && newline < tail.length - 1) tail = tail.slice(newline + 1); // one long line is cut inside
  return `\u2026 (${text.length - tail.length} earlier characters cut)\n${tail}`;
}

/** An error's stack (V8's: the message, then "    at …" frames), bounded; undefined for anything else. */
export function stackOf(error: unknown): string | undefined {
  if (!(error instanceof Error)) return undefined;
  let stack: unknown;
  try {
    stack = error.stack;
  } catch {
    return undefined; // a getter that throws must not fail the agent's run
  }
  return typeof stack === "string" && stack !== "" ? boundTraceback(stack) : undefined;
}
