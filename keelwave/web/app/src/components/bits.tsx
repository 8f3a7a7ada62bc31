// Small shared pieces: loading and error states, the loop badge, the status label.
import { LABELS, SHORT_WHO, SYMBOLS, Verdict, beganAt, source, warnings, who } from "../verdict";

export function Loading() {
  return <div className="muted pad" role="status">Loading…</div>;
}

export function Problem(props: { message: string }) {
  return <div className="error pad" role="alert">{props.message}</div>;
}

// LOOP, and who says so: the agent, the server, or both (red: a loop). Nothing when
// neither does.
export function LoopBadge(props: { run: Verdict }) {
  const from = source(props.run);
  if (!from) return null;
  const step = beganAt(props.run);
  const title = `Loop${step !== null ? ` from step ${step}` : ""}: ${who(props.run)}`;
  return (
    <span className={`verdict ${from}`} title={title}>
      <span className="badge loop">LOOP</span> <span className="who">{SHORT_WHO[from]}</span>
    </span>
  );
}

const WHY: Record<string, string> = {
  near_duplicate: "The same call again and again, with inputs that differ only in volatile values or formatting",
  no_progress: "Calls to one tool whose result stays the same while its input changes",
};

// The server's warnings on a run (amber): near-duplicate calls, calls that make no progress.
export function WarningBadges(props: { run: Verdict }) {
  return <>{warnings(props.run).map((kind) => (
    <span key={kind} className="badge warn" title={`${WHY[kind]} (a warning, not a loop)`}>{SYMBOLS[kind]} {LABELS[kind]}</span>
  ))}</>;
}

const SHORT: Record<string, string> = { max_steps_reached: "max steps", context_limit: "context", loop_detected: "loop" };

export function Status(props: { run: { status: string; termination_reason: string | null } }) {
  const { status, termination_reason } = props.run;
  if (status !== "finished") return <span className={`status ${status}`}>{status}</span>;
  const reason = termination_reason ?? "finished";
  const tone = reason === "clean" ? "good" : reason === "error" || reason === "loop_detected" ? "bad" : "warn";
  return <span className={`status ${tone}`} title={reason}>{SHORT[reason] ?? reason}</span>;
}

// A share of a whole as a bar. Not <meter>: the browser paints that green, and green
// here means a clean run only. `tone` colours it when the share is a verdict.
export function ShareBar(props: { value: number; max: number; label: string; tone?: "good" | "bad" | "warn" }) {
  const percent = props.max > 0 ? Math.min(100, (props.value / props.max) * 100) : 0;
  return (
    <span className="share" role="meter" aria-label={props.label} aria-valuemin={0} aria-valuemax={props.max} aria-valuenow={props.value}>
      <span className={`fill ${props.tone ?? ""}`} ref={(el) => { if (el) el.style.width = `${percent}%`; }} />
    </span>
  );
}

// How a run ended, as a colour: clean green, an error or a loop red, any other ending amber.
export const endingTone = (reason: string | null): "good" | "bad" | "warn" | undefined =>
  reason === "clean" ? "good" : reason === "error" || reason === "loop_detected" ? "bad" : reason ? "warn" : undefined;
