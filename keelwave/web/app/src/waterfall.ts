// A run's whole story on one time axis: its steps, model calls and child runs,
// interleaved by start time (GET …/runs/{id}/timeline). Steps still fold into loop and
// cycle bands (timeline.ts); a band sits where its first step began.

import { Me, agentPath, get } from "./api";
import { Band, Step, fold } from "./timeline";
import { Finding } from "./verdict";

export type StepItem = Step & { kind: "step"; ended_at?: string | null; error_traceback?: string | null };

export type CallItem = {
  kind: "model_call"; id: string; step_index: number | null; provider: string; model: string;
  input_tokens: number; output_tokens: number; cache_read_tokens?: number; cost_usd: number | null;
  latency_ms: number | null; status: string; error: string | null; input_messages?: unknown;
  output_messages?: unknown; started_at: string; duration_ms?: number | null; ended_at?: string | null;
};

export type ChildItem = {
  kind: "child_run"; run_id: string; agent_name: string; status: string; termination_reason: string | null;
  step_count: number; cost_usd: number | null; started_at: string; duration_ms: number | null;
  ended_at?: string | null; error?: string | null;
};

export type Item = StepItem | CallItem | ChildItem;

// One line of the waterfall: a band of steps, a model call, or a child run.
export type Row =
  | { kind: "band"; band: Band; start: number; end: number }
  | { kind: "call"; call: CallItem; start: number; end: number }
  | { kind: "child"; child: ChildItem; start: number; end: number };

// What the inspector shows; `key` survives a refresh that replaces the objects.
export type Selection = { kind: "step"; step: StepItem; key: string } | { kind: "call"; call: CallItem; key: string };
export const stepKey = (runId: string, step: Step) => `${runId}:step:${step.step_index}`;
export const callKey = (call: CallItem) => `call:${call.id}`;

const MAX_ITEMS = 20_000;  // a bound on what one page of the browser holds

// Every item of a run, page after page. A server without /timeline (older than the
// dashboard) answers 404 for the route although the run exists: the items are then
// put together from /steps, /llm and the child runs.
export async function loadTimeline(me: Me, runId: string, childRuns: string[] = []): Promise<Item[]> {
  const items: Item[] = [];
  let cursor: string | undefined;
  try {
    do {
      const page = await get<{ data: Item[]; next_cursor: string | null }>(
        agentPath(me, `/runs/${runId}/timeline`), { limit: 1000, cursor });
      items.push(...page.data);
      cursor = page.next_cursor ?? undefined;
    } while (cursor && items.length < MAX_ITEMS);
    return items;
  } catch (error: any) {
    if (error?.status !== 404) throw error;
  }
  return composeTimeline(me, runId, childRuns);
}

async function composeTimeline(me: Me, runId: string, childRuns: string[]): Promise<Item[]> {
  const items: Item[] = [];
  let cursor: string | undefined;
  do {
    const page = await get<any>(agentPath(me, `/runs/${runId}/steps`), { limit: 5000, cursor });
    items.push(...page.data.map((step: Step) => ({ ...step, kind: "step" })));
    cursor = page.next_cursor ?? undefined;
  } while (cursor && items.length < MAX_ITEMS);
  const calls = await get<any>(agentPath(me, `/runs/${runId}/llm`));
  items.push(...calls.data.map((call: any) => ({ ...call, kind: "model_call", duration_ms: call.latency_ms })));
  const children = await Promise.all(childRuns.slice(0, 100).map((id) => get<any>(agentPath(me, `/runs/${id}`))));
  items.push(...children.map(({ data: run }) => ({ ...run, kind: "child_run", run_id: run.id })));
  return items.sort((a, b) => time(a.started_at) - time(b.started_at));
}

const time = (iso: string | null | undefined) => (iso ? new Date(iso).getTime() : NaN);

// When an item ended: as the server says, else its start plus its duration (a step or
// call still going has none: it is drawn as a thin mark, or up to `now` for a child run
// that is running).
export function endOf(item: Item, now: number): number {
  const start = time(item.started_at);
  if (item.ended_at) return time(item.ended_at);
  const ms = item.kind === "model_call" ? item.duration_ms ?? item.latency_ms : item.duration_ms;
  if (ms !== null && ms !== undefined) return start + ms;
  if (item.kind === "child_run" && item.status !== "finished") return now;
  return start;
}

// The rows in start order. Bands keep the steps' order (step_index); model calls and
// child runs are merged in among them by when they started.
export function rowsOf(items: Item[], findings: Finding[], now: number): Row[] {
  const steps = items.filter((item): item is StepItem => item.kind === "step")
    .sort((a, b) => a.step_index - b.step_index);
  const byIndex = new Map(steps.map((step) => [step.step_index, step]));
  const bands: Row[] = fold(steps, findings).map((band) => {
    const members = band.steps.map((step) => byIndex.get(step.step_index)!);
    return {
      kind: "band", band,
      start: Math.min(...members.map((step) => time(step.started_at))),
      end: Math.max(...members.map((step) => endOf(step, now))),
    };
  });
  const others: Row[] = items.flatMap((item): Row[] => {
    if (item.kind === "model_call") return [{ kind: "call", call: item, start: time(item.started_at), end: endOf(item, now) }];
    if (item.kind === "child_run") return [{ kind: "child", child: item, start: time(item.started_at), end: endOf(item, now) }];
    return [];
  }).sort((a, b) => a.start - b.start);
  const rows: Row[] = [];
  let next = 0;
  for (const band of bands) {
    while (next < others.length && others[next].start < band.start) rows.push(others[next++]);
    rows.push(band);
  }
  rows.push(...others.slice(next));
  return rows;
}

// The time axis: from the run's start (or its first item) to its end (or now while it
// runs, or its last item).
export type Axis = { start: number; end: number };

export function axisOf(run: { started_at: string; ended_at: string | null }, rows: Row[], now: number): Axis {
  const starts = rows.map((row) => row.start).filter(Number.isFinite);
  const ends = rows.map((row) => row.end).filter(Number.isFinite);
  const start = Math.min(time(run.started_at), ...starts);
  const end = Math.max(run.ended_at ? time(run.ended_at) : now, ...ends);
  return { start, end: Math.max(end, start + 1) };
}

// A bar's place on the axis, in percent: where it begins and how wide it is (at least a
// sliver, so an instant still shows).
export function place(axis: Axis, start: number, end: number): { left: number; width: number } {
  const span = axis.end - axis.start;
  const left = Math.min(100, Math.max(0, ((start - axis.start) / span) * 100));
  const width = Math.max(0.4, Math.min(100 - left, ((Math.max(end, start) - start) / span) * 100));
  return { left, width };
}

// The failing step of a failed run: the last step with an error.
export function failingStep(items: Item[]): StepItem | null {
  const failed = items.filter((item): item is StepItem => item.kind === "step" && !!item.error);
  return failed.length ? failed.reduce((a, b) => (b.step_index > a.step_index ? b : a)) : null;
}
