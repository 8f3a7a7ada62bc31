// A run's steps as a timeline in which a loop reads as one band (the same folding as
// keelwave/remote/timeline.py):
// - consecutive steps sharing a looping fingerprint fold into one band: web_search ×5;
// - the steps of a cycle the server found (/findings) fold into one band, the steps
//   without a tool between its calls included: search → open ×3.
// Near-duplicate and no-progress findings are not folded: their steps carry a mark, and
// the step where the finding began carries its sentence.

import { Finding, LABELS, WARNING_KINDS } from "./verdict";

export type Step = {
  step_index: number; step_type: string; tool_name: string | null; tool_input: unknown;
  tool_output: unknown; content: string | null; fingerprint: string | null; in_loop: boolean;
  loop_hits: number; started_at: string; duration_ms: number | null; error: string | null;
};

// A warning finding on a band; `first`: the band holds the finding's first step.
export type Mark = { finding: Finding; first: boolean };

export type Band = { steps: Step[]; cycle?: Finding; marks: Mark[] };

export const nameOf = (step: Step) => step.tool_name ?? step.step_type;

export const isLoopBand = (band: Band) => !!band.cycle || band.steps.length > 1;

export function fold(steps: Step[], findings: Finding[] = []): Band[] {
  const present = new Set(steps.map((step) => step.step_index));
  const cycles = findings
    .filter((f) => f.kind === "cycle" && f.step_indices.some((i) => present.has(i)))
    .sort((a, b) => a.began_at_step - b.began_at_step);
  const bands: Band[] = [];
  for (const step of steps) {
    const index = step.step_index;
    const current = bands.at(-1);
    if (current?.cycle && index <= current.cycle.step_indices.at(-1)!) {
      current.steps.push(step);  // inside a cycle: its think steps too
      continue;
    }
    const currentEnd = current?.steps.at(-1)?.step_index ?? -Infinity;
    const cycle = cycles.find((c) => c.step_indices[0] <= index && index <= c.step_indices.at(-1)!
      && currentEnd < c.step_indices[0]);
    if (cycle) {
      bands.push({ steps: [step], cycle, marks: [] });
      continue;
    }
    const last = current?.steps.at(-1);
    if (current && !current.cycle && last && step.in_loop && step.fingerprint && last.fingerprint === step.fingerprint) {
      current.steps.push(step);
    } else {
      bands.push({ steps: [step], marks: [] });
    }
  }
  const where = new Map<number, Band>();
  for (const band of bands) for (const step of band.steps) where.set(step.step_index, band);
  for (const finding of findings) {
    if (!(WARNING_KINDS as string[]).includes(finding.kind)) continue;
    const first = where.get(finding.step_indices[0]);
    for (const index of finding.step_indices) {
      const band = where.get(index);
      if (band && !band.marks.some((mark) => mark.finding === finding)) band.marks.push({ finding, first: band === first });
    }
  }
  return bands;
}

// A cycle's calls once, in order: ["search", "open"].
export function period(band: Band): string[] {
  if (!band.cycle) return [nameOf(band.steps[0])];
  const calls = band.cycle.step_indices;
  const length = Math.max(1, Math.floor(calls.length / Math.max(1, band.cycle.hits)));
  const byIndex = new Map(band.steps.map((step) => [step.step_index, step]));
  return calls.slice(0, length).map((i) => (byIndex.has(i) ? nameOf(byIndex.get(i)!) : "?"));
}

export function bandLabel(band: Band): string {
  if (band.cycle) return `${period(band).join(" → ")} ×${band.cycle.hits}`;
  const name = nameOf(band.steps[0]);
  if (band.steps.length === 1) return name;
  return `${name} ×${band.steps.length}`;
}

export function findingsOf(step: Step, findings: Finding[]): Finding[] {
  return findings.filter((finding) => finding.step_indices.includes(step.step_index));
}

// "near-duplicate" on the finding's first step, else "near-duplicate of step 4",
// "no progress since step 4".
export function markText(mark: Mark): string {
  const label = LABELS[mark.finding.kind];
  if (mark.first) return label;
  return `${label} ${mark.finding.kind === "near_duplicate" ? "of" : "since"} step ${mark.finding.began_at_step}`;
}
