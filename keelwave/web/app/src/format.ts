// Numbers for people; the same rules as the CLI (keelwave/remote/format.py).

export function duration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return "—";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const seconds = ms / 1000;
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes}m ${String(Math.floor(seconds % 60)).padStart(2, "0")}s`;
  return `${Math.floor(minutes / 60)}h ${String(minutes % 60).padStart(2, "0")}m`;
}

export function ago(iso: string | null | undefined): string {
  if (!iso) return "—";
  const seconds = (Date.now() - new Date(iso).getTime()) / 1000;
  if (seconds < 0) return "just now";
  if (seconds < 60) return `${Math.floor(seconds)}s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)}h ago`;
  return `${Math.floor(seconds / 86400)}d ago`;
}

export function tokens(count: number | null | undefined): string {
  if (!count) return "0";
  if (count < 1000) return String(count);
  if (count < 1_000_000) return `${(count / 1000).toFixed(1)}k`;
  return `${(count / 1_000_000).toFixed(2)}M`;
}

export function money(usd: number | null | undefined): string {
  if (usd === null || usd === undefined) return "—";
  if (usd === 0) return "$0";
  if (usd < 0.000001) return "<$0.000001";
  if (usd < 0.01) {
    // two significant digits: a run of a cheap model costs $0.00019, not $0.000
    const rounded = Number(usd.toPrecision(2));
    if (rounded < 0.01) return `$${rounded.toFixed(1 - Math.floor(Math.log10(rounded)))}`;
  }
  return `$${usd.toFixed(2)}`;
}

export function rate(value: number | null | undefined): string {
  return value === null || value === undefined ? "—" : `${(value * 100).toFixed(1)}%`;
}

export function change(current: number | null, previous: number | null, points = false): string {
  if (current === null || previous === null || current === undefined || previous === undefined) return "—";
  if (points) {
    const delta = (current - previous) * 100;
    return `${delta >= 0 ? "+" : ""}${delta.toFixed(1)} pts`;
  }
  if (previous === 0) return current ? "new" : "—";
  const pct = ((current - previous) / previous) * 100;
  return `${pct >= 0 ? "+" : ""}${pct.toFixed(0)}%`;
}

export const shortId = (id: string) => id.slice(0, 8);

// "2026-12-01 12:00:03 UTC": the local time, with its time zone.
export function when(iso: string | null | undefined): string {
  if (!iso) return "—";
  const parts = Object.fromEntries(new Intl.DateTimeFormat("en-GB", {
    year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit",
    hourCycle: "h23", timeZoneName: "short",
  }).formatToParts(new Date(iso)).map((part) => [part.type, part.value]));
  return `${parts.year}-${parts.month}-${parts.day} ${parts.hour}:${parts.minute}:${parts.second} ${parts.timeZoneName}`;
}

// A span of whole seconds: "none", "45s", "5m", "1h 30m", "2d".
export function span(total: number): string {
  if (!total) return "none";
  const units: [number, string][] = [[86400, "d"], [3600, "h"], [60, "m"], [1, "s"]];
  const out: string[] = [];
  let rest = total;
  for (const [size, unit] of units) {
    if (rest >= size) { out.push(`${Math.floor(rest / size)}${unit}`); rest %= size; }
  }
  return out.slice(0, 2).join(" ");
}

// A number as short as it can be said: 51, 0.2, 0.1667.
export function number(value: number): string {
  return Number.isInteger(value) ? String(value) : String(Number(value.toFixed(4)));
}

// "Dec 1, 15:04:03 UTC": short enough for a table cell, still absolute and zoned.
export function whenShort(iso: string | null | undefined): string {
  if (!iso) return "—";
  const parts = Object.fromEntries(new Intl.DateTimeFormat("en-US", {
    month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit",
    hourCycle: "h23", timeZoneName: "short",
  }).formatToParts(new Date(iso)).map((part) => [part.type, part.value]));
  return `${parts.month} ${parts.day}, ${parts.hour}:${parts.minute}:${parts.second} ${parts.timeZoneName}`;
}

// Where on a run's time axis something began: "+0 ms", "+1.2 s".
export const offset = (ms: number) => `+${duration(Math.max(0, ms))}`;

// A difference with its sign: "+3", "−$0.02", "+1.2 s"; "±0" when there is none.
export function delta(value: number | null | undefined, unit: "count" | "money" | "ms" = "count"): string {
  if (value === null || value === undefined) return "—";
  if (value === 0) return "±0";
  const sign = value > 0 ? "+" : "−";
  const size = Math.abs(value);
  if (unit === "money") return sign + money(size);
  if (unit === "ms") return sign + duration(size);
  return sign + (Number.isInteger(size) ? tokens(size) : number(size));
}
