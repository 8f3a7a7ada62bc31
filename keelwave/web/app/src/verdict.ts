// Whose word a run's loop rests on: the agent's (loop_detected, as the SDK reported it
// at finish), the server's (detected_loop, found in the stored steps), or both. A run
// loops when either says so. The same rules as keelwave/remote/verdict.py.
// Colours mean one thing: red is a loop, amber a warning that is not a loop.

export type Kind = "exact_loop" | "cycle" | "near_duplicate" | "no_progress";
export const KINDS: Kind[] = ["exact_loop", "cycle", "near_duplicate", "no_progress"];
export const LOOP_KINDS: Kind[] = ["exact_loop", "cycle"];
export const WARNING_KINDS: Kind[] = ["near_duplicate", "no_progress"];
export const LABELS: Record<Kind, string> = {
  exact_loop: "exact loop", cycle: "cycle", near_duplicate: "near-duplicate", no_progress: "no progress",
};
export const SYMBOLS: Record<string, string> = { near_duplicate: "≈", no_progress: "∅" };

export type Finding = {
  kind: Kind; began_at_step: number; step_indices: number[]; tool_names: string[]; hits: number; detail: string;
};

export type Verdict = {
  loop_detected: boolean; loop_step_index: number | null;
  detected_loop?: boolean; detected_loop_step_index?: number | null; findings?: Kind[];
  from_spans?: boolean; metadata?: unknown;
};

// A run that came as OpenTelemetry spans: no agent reported anything, and its
// loop_detected is the server's own reading of the spans' fingerprints. The server says so
// in from_spans (older servers: only in a run's own metadata, which names the trace).
// keelwave/remote/verdict.py's from_spans.
export function fromSpans(run: Verdict): boolean {
  if (run.from_spans !== undefined) return run.from_spans;
  const metadata = run.metadata;
  return typeof metadata === "object" && metadata !== null && "otel.trace_id" in metadata;
}

export type Source = "both" | "agent" | "server" | null;

// (A run sent as spans has no agent's word: its loop_detected is the server's.)
export function source(run: Verdict): Source {
  const spans = fromSpans(run);
  const agent = !!run.loop_detected && !spans, server = !!run.detected_loop || (!!run.loop_detected && spans);
  return agent && server ? "both" : agent ? "agent" : server ? "server" : null;
}

export const loops = (run: Verdict) => source(run) !== null;

export const isLoopKind = (kind: string) => (LOOP_KINDS as string[]).includes(kind);

export function beganAt(run: Verdict): number | null {
  const steps: number[] = [];
  if (run.loop_detected && run.loop_step_index != null) steps.push(run.loop_step_index);
  if (run.detected_loop && run.detected_loop_step_index != null) steps.push(run.detected_loop_step_index);
  return steps.length ? Math.min(...steps) : null;
}

// "detected by the server"; "reported by the agent at step 2; the server found it from step 1".
export function who(run: Verdict): string {
  const agentStep = run.loop_step_index, serverStep = run.detected_loop_step_index;
  switch (source(run)) {
    case "agent": return "reported by the agent";
    case "server": return "detected by the server";
    case "both":
      return agentStep != null && agentStep !== serverStep
        ? `reported by the agent at step ${agentStep}; the server found it from step ${serverStep}`
        : "reported by the agent and detected by the server";
  }
  return "";
}

export const SHORT_WHO: Record<string, string> = { both: "agent + server", agent: "agent", server: "server" };

export function kinds(run: Verdict): Kind[] {
  const found = new Set(run.findings ?? []);
  return KINDS.filter((kind) => found.has(kind));
}

export const warnings = (run: Verdict) => kinds(run).filter((kind) => !isLoopKind(kind));

export function loopRate(runs: Verdict[]): number | null {
  return runs.length ? runs.filter(loops).length / runs.length : null;
}
