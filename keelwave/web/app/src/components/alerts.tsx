// Alerts, said in words: a rule's condition, an event's value against its threshold, its
// state and its delivery. Shared by the Alerts page, the run page and the runs list.
// Colours mean one thing: red is firing (or a delivery that failed), amber a delivery
// still being tried, green delivered or resolved.
import { useState } from "react";
import * as fmt from "../format";

export type Condition =
  | { type: "run"; metric: string; above: number }
  | { type: "finding"; kinds: string[] }
  | { type: "termination"; reasons: string[] }
  | { type: "stalled" }
  | { type: "window"; metric: string; window: string; above?: number | null; below?: number | null };

export type Rule = {
  id: string; name: string; destination_id: string; scope: { agent_name: string | null };
  condition: Condition; cooldown_seconds: number; enabled: boolean; created_at: string; updated_at: string;
};

export type Destination = { id: string; name: string; kind: "webhook" | "slack"; url: string; has_secret: boolean; created_at: string };

export type Attempt = { attempt: number; at: string; duration_ms: number | null; status: number | null; error: string | null };

export type AlertEvent = {
  id: string; rule_id: string | null; rule_name: string; destination_id: string | null;
  state: "firing" | "resolved"; agent_name: string | null; run_id: string | null;
  metric: string; value: unknown; threshold: unknown; fired_at: string;
  delivery: {
    state: "pending" | "delivered" | "failed"; attempts: Attempt[];
    next_attempt_at: string | null; delivered_at: string | null; last_error: string | null;
  };
};

export const RUN_METRICS = ["steps", "cost_usd", "duration_ms", "tokens"];
export const WINDOW_METRICS = ["loop_rate", "detected_loop_rate", "error_rate", "stalled_runs", "cost_usd", "p95_duration_ms", "runs"];
export const WINDOWS = ["15m", "1h", "24h"];
export const FINDING_KINDS = ["exact_loop", "cycle", "near_duplicate", "no_progress"];
export const TERMINATION_REASONS = ["clean", "max_steps_reached", "context_limit", "error", "loop_detected", "timeout"];
const RUN_WORDS: Record<string, string> = { steps: "steps", cost_usd: "cost", duration_ms: "duration", tokens: "tokens" };

// A metric's value as people read it: money, a duration, or a plain number.
export function measure(metric: string, value: unknown): string {
  if (value === null || value === undefined) return "—";
  if (Array.isArray(value)) return value.length ? value.join(", ") : "none";
  if (typeof value !== "number") return String(value);
  if (metric === "cost_usd") return fmt.money(value);
  if (metric.endsWith("duration_ms") || metric === "silent_ms") return fmt.duration(value);
  return fmt.number(value);
}

// "a run's steps > 50", "a run has exact_loop or cycle", "error_rate over 1h > 0.2".
export function conditionWords(condition: Condition): string {
  switch (condition.type) {
    case "run": return `a run's ${RUN_WORDS[condition.metric] ?? condition.metric} > ${measure(condition.metric, condition.above)}`;
    case "finding": return `a run has ${condition.kinds.join(" or ")}`;
    case "termination": return `a run ends with ${condition.reasons.join(" or ")}`;
    case "stalled": return "a run stalls (silent, not finished)";
    case "window": {
      const below = condition.below !== null && condition.below !== undefined;
      return `${condition.metric} over ${condition.window} ${below ? "<" : ">"} ${measure(condition.metric, below ? condition.below : condition.above)}`;
    }
  }
  return JSON.stringify(condition);
}

export function scopeWords(rule: Rule): string {
  return rule.scope.agent_name ?? "every agent";
}

// "51 > 50" while firing, "0.1 ≤ 0.2" once resolved; for findings and endings, what the run
// had against what the rule watches.
export function EventValue(props: { event: AlertEvent; rule?: Rule }) {
  const { event } = props;
  const { value, threshold, metric } = event;
  if (typeof value === "number" && typeof threshold === "number") {
    const condition = props.rule?.condition;
    const below = condition?.type === "window" && condition.below !== null && condition.below !== undefined;
    const op = event.state === "firing" ? (below ? "<" : ">") : (below ? "≥" : "≤");
    return (
      <span className="value" title={metric}>
        <span className="muted">{metric}</span> <strong>{measure(metric, value)}</strong> {op} {measure(metric, threshold)}
      </span>
    );
  }
  return (
    <span className="value" title={metric}>
      <strong>{measure(metric, value)}</strong> <span className="muted">· watching {measure(metric, threshold)}</span>
    </span>
  );
}

export function EventState(props: { state: string }) {
  return <span className={`alert-state ${props.state}`}>{props.state}</span>;
}

export function When(props: { at: string | null }) {
  if (!props.at) return <>—</>;
  return <span className="when" title={props.at}>{fmt.when(props.at)} <span className="muted">({fmt.ago(props.at)})</span></span>;
}

export function DeliveryState(props: { delivery: AlertEvent["delivery"] }) {
  const { delivery } = props;
  const title = delivery.state === "delivered" ? `delivered ${fmt.when(delivery.delivered_at)}`
    : delivery.state === "pending" ? (delivery.next_attempt_at ? `next attempt ${fmt.when(delivery.next_attempt_at)}` : "about to be sent")
    : `gave up: ${delivery.last_error ?? "no answer"}`;
  return <span className={`delivery ${delivery.state}`} title={title}>{delivery.state}</span>;
}

// Each delivery attempt: when, the HTTP status, how long, what went wrong.
export function Attempts(props: { delivery: AlertEvent["delivery"] }) {
  const { delivery } = props;
  if (!delivery.attempts.length) return <p className="muted small">Not sent yet.</p>;
  return (
    <table className="attempts-table">
      <thead><tr><th className="num">attempt</th><th>at</th><th>status</th><th className="num">duration</th><th>error</th></tr></thead>
      <tbody>{delivery.attempts.map((attempt) => {
        const ok = attempt.status !== null && attempt.status >= 200 && attempt.status < 300 && !attempt.error;
        return (
          <tr key={attempt.attempt}>
            <td className="num">{attempt.attempt}</td>
            <td><When at={attempt.at} /></td>
            <td className={ok ? "good" : "bad"}>{attempt.status !== null ? `HTTP ${attempt.status}` : "no answer"}</td>
            <td className="num">{fmt.duration(attempt.duration_ms)}</td>
            <td className="wrap">{attempt.error ?? "—"}</td>
          </tr>
        );
      })}</tbody>
      {delivery.state === "pending" && delivery.next_attempt_at && (
        <tfoot><tr><td colSpan={5} className="muted small">next attempt {fmt.when(delivery.next_attempt_at)}</td></tr></tfoot>
      )}
    </table>
  );
}

// A delivery state with its attempts folded under a button.
export function DeliveryCell(props: { delivery: AlertEvent["delivery"] }) {
  const [open, setOpen] = useState(false);
  const count = props.delivery.attempts.length;
  return (
    <div className="delivery-cell">
      <DeliveryState delivery={props.delivery} />{" "}
      <button className="ghost small" aria-expanded={open} onClick={() => setOpen(!open)}>
        {count} attempt{count === 1 ? "" : "s"} {open ? "▾" : "▸"}
      </button>
      {open && <Attempts delivery={props.delivery} />}
    </div>
  );
}

// The mark on a run that fired an alert (red: firing).
export function Bell(props: { title: string }) {
  return (
    <span className="bell" title={props.title} role="img" aria-label={props.title}>
      <svg viewBox="0 0 16 16" width="13" height="13" aria-hidden="true">
        <path d="M8 1.5a4.5 4.5 0 0 0-4.5 4.5v3L2 11.5v1h12v-1L12.5 9V6A4.5 4.5 0 0 0 8 1.5zM6.2 13.5a1.9 1.9 0 0 0 3.6 0z" fill="currentColor" />
      </svg>
    </span>
  );
}
