// Consecutive steps sharing a looping fingerprint read as one band
// (the same folding as keelwave/remote/timeline.py).

export type Step = {
  step_index: number; step_type: string; tool_name: string | null; tool_input: unknown;
  tool_output: unknown; content: string | null; fingerprint: string | null; in_loop: boolean;
  loop_hits: number; started_at: string; duration_ms: number | null; error: string | null;
};

export type Band = { steps: Step[] };

export function fold(steps: Step[]): Band[] {
  const bands: Band[] = [];
  for (const step of steps) {
    const last = bands.at(-1)?.steps.at(-1);
    if (last && step.in_loop && step.fingerprint && last.fingerprint === step.fingerprint) {
      bands.at(-1)!.steps.push(step);
    } else {
      bands.push({ steps: [step] });
    }
  }
  return bands;
}

export function bandLabel(band: Band): string {
  const first = band.steps[0];
  const name = first.tool_name ?? first.step_type;
  if (band.steps.length === 1) return name;
  return `${name} ×${band.steps.length}`;
}
