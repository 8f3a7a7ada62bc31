// A run: one execution of an agent, with its steps, model calls and loop state.
import { randomUUID } from "node:crypto";
import { canonicalJson, fingerprint } from "./canonical.js";
import { TERMINATION_REASONS, type CallStatus, type TerminationReason } from "./protocol.js";
import type { Event } from "./transport.js";

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
const errorText = (error: unknown) => (error instanceof Error ? `${error.name}: ${error.message}` : String(error));

export class Run {
  readonly id: string;
  loopDetected = false;
  loopStepIndex: number | null = null;
  terminationReason: TerminationReason | null = null;
  private lastIndex = 0;
  private firstSeen = new Map<string, number>();

  constructor(private sink: Sink, readonly name: string, readonly parent: Run | null, private options: RunOptions = {}) {
    this.id = options.runId ?? randomUUID();
    const body: Record<string, unknown> = { id: this.id, agent_name: name, started_at: now() };
    if (parent) body.parent_run_id = parent.id;
    if (options.metadata) body.metadata = options.metadata;
    if (options.tags) body.tags = options.tags;
    let text = JSON.stringify(body);
    if (options.input !== undefined) text = `${text.slice(0, -1)},"input":${canonicalJson(options.input)}}`;
    sink({ kind: "run", body: text });
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
   * flags the run on the first repeat (as the product documents say).
   */
  toolCall(name: string, call: { input?: unknown; output?: unknown; error?: unknown; durationMs?: number; startedAt?: string } = {}): number {
    const index = this.nextStepIndex();
    const inputJson = canonicalJson(call.input ?? null);
    this.sendStep(index, "tool_call", name, inputJson, call.output, undefined, call.durationMs, call.error, call.startedAt);
    this.check(fingerprint(name, inputJson).toString("base64"), index);
    return index;
  }

  /** Fingerprint `name` + `input` as the latest step; true if it repeats an earlier one. */
  checkFingerprint(name: string, input: unknown): boolean {
    return this.check(fingerprint(name, canonicalJson(input)).toString("base64"), this.lastIndex);
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

  llmCall(provider: string, model: string, usage: { inputTokens?: number; outputTokens?: number; cacheReadTokens?: number; reasoningTokens?: number; costUsd?: number; latencyMs?: number; error?: unknown; stepIndex?: number } = {}): string {
    const id = randomUUID();
    const body: Record<string, unknown> = {
      id, run_id: this.id, provider, model,
      input_tokens: usage.inputTokens ?? 0, output_tokens: usage.outputTokens ?? 0,
      cache_read_tokens: usage.cacheReadTokens ?? 0, reasoning_tokens: usage.reasoningTokens ?? 0,
      status: (usage.error === undefined ? "ok" : "error") satisfies CallStatus, started_at: now(),
    };
    if (usage.stepIndex !== undefined) body.step_index = usage.stepIndex;
    if (usage.costUsd !== undefined) body.cost_usd = usage.costUsd;
    if (usage.latencyMs !== undefined) body.latency_ms = Math.max(0, usage.latencyMs);
    if (usage.error !== undefined) body.error = errorText(usage.error);
    this.sink({ kind: "ai", body: JSON.stringify(body) });
    return id;
  }

  /** Finish the run; later calls are ignored (the first finish wins). */
  finish(reason: TerminationReason = "clean", end: { output?: unknown; error?: unknown } = {}): void {
    if (this.finished) return;
    if (!TERMINATION_REASONS.includes(reason)) throw new Error(`terminationReason must be one of ${TERMINATION_REASONS.join(", ")}`);
    this.terminationReason = reason;
    const body: Record<string, unknown> = { id: this.id, termination_reason: reason, loop_detected: this.loopDetected, ended_at: now() };
    if (this.loopStepIndex !== null) body.loop_step_index = this.loopStepIndex;
    if (end.error !== undefined) body.error = errorText(end.error);
    let text = JSON.stringify(body);
    if (end.output !== undefined) text = `${text.slice(0, -1)},"output":${canonicalJson(end.output)}}`;
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

  /** @internal */
  sendStep(index: number, stepType: string, toolName?: string, inputJson?: string, output?: unknown, content?: string, durationMs?: number, error?: unknown, startedAt?: string): void {
    // Built by hand so tool_input goes out as exactly the text that was hashed.
    let text = `{"run_id":"${this.id}","step_index":${index},"step_type":"${stepType}","started_at":"${startedAt ?? now()}"`;
    if (toolName !== undefined) text += `,"tool_name":${JSON.stringify(toolName)}`;
    if (inputJson !== undefined) text += `,"tool_input":${inputJson}`;
    if (output !== undefined) text += `,"tool_output":${canonicalJson(output)}`;
    if (content !== undefined) text += `,"content":${JSON.stringify(content)}`;
    if (durationMs !== undefined) text += `,"duration_ms":${Math.max(0, durationMs).toFixed(3)}`;
    if (error !== undefined && error !== null) text += `,"error":${JSON.stringify(errorText(error))}`;
    this.sink({ kind: "step", body: text + "}" });
  }
}
