// Small shared pieces: loading and error states, the loop badge, the status label.

export function Loading() {
  return <div className="muted pad" role="status">Loading…</div>;
}

export function Problem(props: { message: string }) {
  return <div className="error pad" role="alert">{props.message}</div>;
}

export function LoopBadge() {
  return <span className="badge loop" title="This run repeated a tool call with the same input">LOOP</span>;
}

const SHORT: Record<string, string> = { max_steps_reached: "max steps", context_limit: "context", loop_detected: "loop" };

export function Status(props: { run: { status: string; termination_reason: string | null } }) {
  const { status, termination_reason } = props.run;
  if (status !== "finished") return <span className={`status ${status}`}>{status}</span>;
  const reason = termination_reason ?? "finished";
  const tone = reason === "clean" ? "good" : reason === "error" || reason === "loop_detected" ? "bad" : "warn";
  return <span className={`status ${tone}`} title={reason}>{SHORT[reason] ?? reason}</span>;
}
