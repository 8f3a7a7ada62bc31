// A run: one execution of an agent, with its steps, model calls and loop state.
// Every event is checked as it is made (validate.ts): a bad value drops its own
// event, or leaves out its own field, and is reported once; it never reaches the
// server to get a whole batch refused.
//
// Everything that can hold the agent's data is redacted (redact.ts) with the run's
// redaction (the client's; the built-in rules for a run made by hand) before its
// event is queued: a step's input first of all, since its fingerprint is taken over
// the redacted text, the text the server receives and fingerprints too.
import { randomUUID } from "node:crypto";
import { canonicalJson, fingerprint } from "./canonical.js";
import { STEP_INDEX_MAX, TERMINATION_REASONS, type CallStatus, type StepType, type TerminationReason } from "./protocol.js";
import { DEFAULT_REDACTION, type Redaction } from "./redact.js";
import { stackOf } from "./traceback.js";
import type { Event } from "./transport.js";
import * as check from "./validate.js";

/** A guard stopped the agent; `terminationReason` says which. */
export class AgentStopped extends Error {
  terminationReason: TerminationReason = "error";
}
export class MaxStepsExceeded extends AgentStopped {
  override terminationReason: TerminationReason = "max_steps_reached";
  constructor(public maxSteps: number) {
    super(`the agent took more than maxSteps=${maxSteps} steps`);
  }
}
export class LoopDetected extends AgentStopped {
  override terminationReason: TerminationReason = "loop_detected";
  constructor(public firstStep: number, public repeatedAt: number) {
    super(`step ${repeatedAt} repeats step ${firstStep}: same tool, same input`);
  }
}

export type RunOptions = { input?: unknown; metadata?: Record<string, unknown>; tags?: string[]; maxSteps?: number; stopOnLoop?: boolean; runId?: string };
type Sink = (event: Event) => void;

const now = () => new Date().toISOString();
const errorText = (error: unknown) => check.freeText(error instanceof Error ? `${error.name}: ${error.message}` : String(error));

export class Run {
  readonly id: string;
  /** False when the server would refuse the run's name or id: nothing of it is sent (the log says why). */
  readonly recorded: boolean = true;
  loopDetected = false;
  loopStepIndex: number | null = null;
  terminationReason: TerminationReason | null = null;
  private lastIndex = 0;
  private firstSeen = new Map<string, number>();

  constructor(private sink: Sink, readonly name: string, readonly parent: Run | null, private options: RunOptions = {}, private report: check.Report = check.defaultReport, private redaction: Redaction | null = DEFAULT_REDACTION) {
    const canonical = options.runId === undefined ? randomUUID() : check.asUuid(String(options.runId));
    this.id = canonical ?? String(options.runId);
    const problem = canonical === undefined ? "is not a UUID" : check.nameProblem(name);
    if (problem !== undefined) {
      this.recorded = false;
      const [field, value] = canonical === undefined ? ["runId", options.runId] : ["agent_name", name];
      check.refuse(report, field, value, problem, "the run is not recorded");
      return;
    }
    const body: Record<string, unknown> = { id: this.id, agent_name: name, started_at: now() };
    if (parent?.recorded) body.parent_run_id = parent.id;
    const tags = check.cleanTags(options.tags?.map((tag) => (typeof tag === "string" && redaction ? redaction.redactText(tag) : tag)), report);
    if (tags) body.tags = tags;
    let text = JSON.stringify(body).slice(0, -1);
    // As canonical JSON: a BigInt or a cycle in metadata must not throw into the agent.
    if (options.metadata) text += `,"metadata":${this.payload(options.metadata)}`;
    if (options.input !== undefined) text += `,"input":${this.payload(options.input)}`;
    sink({ kind: "run", body: text + "}" });
  }

  /** @internal `value` as the JSON text to send (and fingerprint): canonical, redacted. */
  payload(value: unknown): string {
    const text = canonicalJson(value);
    return this.redaction ? this.redaction.redactJson(text) : text;
  }

  /** @internal Free text to send (an error, a thought), redacted. */
  sendableText(value: string): string {
    return this.redaction ? check.freeText(this.redaction.redactText(value)) : value;
  }

  get finished(): boolean {
    return this.terminationReason !== null;
  }

  /** Take the next step index (they start at 1); throws MaxStepsExceeded past maxSteps. */
  nextStepIndex(): number {
    const index = ++this.lastIndex;
    if (this.options.maxSteps !== undefined && index > this.options.maxSteps) throw new MaxStepsExceeded(this.options.maxSteps);
    return index;
  }

  /**
   * Record a tool call and fingerprint it: unlike Python's tool_call, this one
   * flags the run on the first repeat (as the product documents say). A name
   * the server would refuse drops the step (the index is still taken).
   */
  toolCall(name: string, call: { input?: unknown; output?: unknown; error?: unknown; durationMs?: number; startedAt?: string } = {}): number {
    const index = this.nextStepIndex();
    const problem = check.nameProblem(name);
    if (problem !== undefined) {
      check.refuse(this.report, "tool_name", name, problem, "the step is dropped");
      return index;
    }
    const inputJson = this.payload(call.input ?? null);
    this.sendStep(index, "tool_call", name, inputJson, call.output, undefined, call.durationMs, call.error, call.startedAt);
    this.check(fingerprint(name, inputJson).toString("base64"), index);
    return index;
  }

  /**
   * Fingerprint `name` + `input` as the latest step; true if it repeats an earlier one.
   * The input is fingerprinted redacted, as it is sent: inputs that differ only in a secret are the same call.
   */
  checkFingerprint(name: string, input: unknown): boolean {
    return this.check(fingerprint(name, this.payload(input)).toString("base64"), this.lastIndex);
  }

  /** Flag the run as looping from `stepIndex` (where the repetition began). */
  markLoop(stepIndex: number): void {
    if (!this.loopDetected) {
      this.loopDetected = true;
      this.loopStepIndex = stepIndex;
    }
  }

  think(content: string): number {
    const index = this.nextStepIndex();
    this.sendStep(index, "think", undefined, undefined, undefined, content);
    return index;
  }

  replan(content: string): number {
    const index = this.nextStepIndex();
    this.sendStep(index, "replan", undefined, undefined, undefined, content);
    return index;
  }

  /**
   * Record a model call; returns its id (sent with it, so a resend is stored once).
   * A provider, model or token count the server would refuse drops the call; a
   * cost or latency it would refuse is left out (the server then prices the call).
   */
  llmCall(provider: string, model: string, usage: { inputTokens?: number; outputTokens?: number; cacheReadTokens?: number; reasoningTokens?: number; costUsd?: number; latencyMs?: number; error?: unknown; stepIndex?: number } = {}): string {
    const id = randomUUID();
    for (const [field, value] of [["provider", provider], ["model", model]] as const) {
      const problem = check.nameProblem(value);
      if (problem !== undefined) {
        check.refuse(this.report, field, value, problem, "the model call is dropped");
        return id;
      }
    }
    const tokens: Record<string, unknown> = {
      input_tokens: usage.inputTokens ?? 0, output_tokens: usage.outputTokens ?? 0,
      cache_read_tokens: usage.cacheReadTokens ?? 0, reasoning_tokens: usage.reasoningTokens ?? 0,
    };
    for (const [field, value] of Object.entries(tokens)) {
      const problem = check.tokenProblem(value);
      if (problem !== undefined) {
        check.refuse(this.report, field, value, problem, "the model call is dropped");
        return id;
      }
    }
    const body: Record<string, unknown> = {
      id, provider, model, ...tokens,
      status: (usage.error === undefined ? "ok" : "error") satisfies CallStatus, started_at: now(),
    };
    if (this.recorded) body.run_id = this.id;
    if (usage.stepIndex !== undefined && this.recorded) {
      const problem = check.stepIndexProblem(usage.stepIndex);
      if (problem === undefined) body.step_index = usage.stepIndex;
      else check.refuse(this.report, "step_index", usage.stepIndex, problem, "the call is sent without it");
    }
    const cost = check.optionalAmount(usage.costUsd, "cost_usd", "model call", this.report);
    if (cost !== undefined) body.cost_usd = cost;
    const latency = check.optionalAmount(usage.latencyMs, "latency_ms", "model call", this.report);
    if (latency !== undefined) {
      body.latency_ms = latency;
      // Recorded once the model answered: it began that long ago, where a timeline draws it.
      body.started_at = new Date(Date.now() - latency).toISOString();
    }
    if (usage.error !== undefined) body.error = this.sendableText(errorText(usage.error));
    this.sink({ kind: "ai", body: JSON.stringify(body) });
    return id;
  }

  /** Finish the run; later calls are ignored (the first finish wins). */
  finish(reason: TerminationReason = "clean", end: { output?: unknown; error?: unknown } = {}): void {
    if (this.finished) return;
    check.vocabulary(reason, TERMINATION_REASONS, "terminationReason");
    this.terminationReason = reason;
    if (!this.recorded) return;
    const body: Record<string, unknown> = { id: this.id, termination_reason: reason, loop_detected: this.loopDetected, ended_at: now() };
    if (this.loopStepIndex !== null) {
      const problem = check.stepIndexProblem(this.loopStepIndex);
      if (problem === undefined) body.loop_step_index = this.loopStepIndex;
      else check.refuse(this.report, "loop_step_index", this.loopStepIndex, problem, "the run is finished without it");
    }
    if (end.error !== undefined) {
      body.error = this.sendableText(errorText(end.error));
      const stack = stackOf(end.error);
      if (stack !== undefined) body.error_traceback = this.sendableText(check.freeText(stack));
    }
    let text = JSON.stringify(body);
    if (end.output !== undefined) text = `${text.slice(0, -1)},"output":${this.payload(end.output)}}`;
    this.sink({ kind: "finish", body: text });
  }

  /** @internal */
  check(digest: string, index: number): boolean {
    const first = this.firstSeen.get(digest);
    if (first === undefined) {
      this.firstSeen.set(digest, index);
      return false;
    }
    if (first === index) return false;
    this.markLoop(first);
    if (this.options.stopOnLoop) throw new LoopDetected(first, index);
    return true;
  }

  /** @internal `inputJson` comes redacted (it was fingerprinted so); the rest is redacted here. */
  sendStep(index: number, stepType: StepType, toolName?: string, inputJson?: string, output?: unknown, content?: string, durationMs?: number, error?: unknown, startedAt?: string): void {
    if (!this.recorded) return;
    if (index > STEP_INDEX_MAX) {
      check.refuse(this.report, "step_index", index, `is beyond ${STEP_INDEX_MAX}`, "the step is dropped");
      return;
    }
    if (durationMs !== undefined) durationMs = check.optionalAmount(durationMs, "duration_ms", "step", this.report);
    // Built by hand so tool_input goes out as exactly the text that was hashed.
    let text = `{"run_id":"${this.id}","step_index":${index},"step_type":"${stepType}","started_at":"${startedAt ?? now()}"`;
    if (toolName !== undefined) text += `,"tool_name":${JSON.stringify(toolName)}`;
    if (inputJson !== undefined) text += `,"tool_input":${inputJson}`;
    if (output !== undefined) text += `,"tool_output":${this.payload(output)}`;
    if (content !== undefined) text += `,"content":${JSON.stringify(check.freeText(this.sendableText(String(content))))}`;
    if (durationMs !== undefined) text += `,"duration_ms":${durationMs.toFixed(3)}`;
    if (error !== undefined && error !== null) {
      text += `,"error":${JSON.stringify(this.sendableText(errorText(error)))}`;
      const stack = stackOf(error);
      if (stack !== undefined) text += `,"error_traceback":${JSON.stringify(this.sendableText(check.freeText(stack)))}`;
    }
    this.sink({ kind: "step", body: text + "}" });
  }
}
