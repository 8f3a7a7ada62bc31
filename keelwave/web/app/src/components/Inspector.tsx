// The panel beside the waterfall: the selected step (input, output, error and its
// traceback) or model call (tokens, cost, the prompt and the response, its step).
import * as fmt from "../format";
import { findingsOf } from "../timeline";
import { Finding, LABELS, isLoopKind } from "../verdict";
import { CallItem, Selection, StepItem } from "../waterfall";

export function Inspector(props: {
  selection: Selection | null; findings: Finding[]; runStart: number; onStep: (index: number) => void;
  calls: CallItem[]; onCall: (call: CallItem) => void;
}) {
  const { selection } = props;
  if (!selection) return <p className="muted">Select a step or a model call to see what went in and what came out.</p>;
  if (selection.kind === "call") return <CallInspector call={selection.call} runStart={props.runStart} onStep={props.onStep} />;
  const calls = props.calls.filter((call) => call.step_index === selection.step.step_index);
  return <StepInspector step={selection.step} findings={props.findings} runStart={props.runStart} calls={calls} onCall={props.onCall} />;
}

const hasValue = (value: unknown) => value !== null && value !== undefined;

function Started(props: { at: string; runStart: number }) {
  return (
    <p className="muted small">
      started {fmt.when(props.at)} · {fmt.offset(new Date(props.at).getTime() - props.runStart)} into the run
    </p>
  );
}

export function Traceback(props: { text: string | null | undefined; open?: boolean }) {
  if (!props.text) return null;
  return (
    <details className="traceback" open={props.open ?? true}>
      <summary>traceback</summary>
      <pre className="error">{props.text}</pre>
    </details>
  );
}

function StepInspector(props: { step: StepItem; findings: Finding[]; runStart: number; calls: CallItem[]; onCall: (call: CallItem) => void }) {
  const { step } = props;
  return (
    <div>
      <p><strong>step {step.step_index}</strong> · {step.step_type}{step.tool_name ? ` · ${step.tool_name}` : ""} · {fmt.duration(step.duration_ms)}</p>
      <Started at={step.started_at} runStart={props.runStart} />
      {step.in_loop && <p className="bad">Same tool, same input: {step.loop_hits} times in this run.</p>}
      {findingsOf(step, props.findings).filter((finding) => finding.kind !== "exact_loop").map((finding) => (
        <p key={finding.kind + finding.began_at_step} className={isLoopKind(finding.kind) ? "bad" : "warn"}>
          {LABELS[finding.kind]}: {finding.detail}.
        </p>))}
      {step.error && <pre className="error">{step.error}</pre>}
      <Traceback text={step.error_traceback} />
      {hasValue(step.tool_input) && <><h3>input</h3><pre className="json">{JSON.stringify(step.tool_input, null, 2)}</pre></>}
      {hasValue(step.tool_output) && <><h3>output</h3><pre className="json">{JSON.stringify(step.tool_output, null, 2)}</pre></>}
      {step.content && <><h3>content</h3><pre>{step.content}</pre></>}
      {props.calls.length > 0 && <>
        <h3>model calls of this step</h3>
        <ul className="step-calls">{props.calls.map((call) => (
          <li key={call.id}><button className="linkish" onClick={() => props.onCall(call)}>{call.model}</button>{" "}
            <span className="muted small">{fmt.tokens(call.input_tokens)} → {fmt.tokens(call.output_tokens)} tokens · {fmt.money(call.cost_usd)}</span></li>))}</ul>
      </>}
      {step.fingerprint && <p className="muted small mono">fingerprint {step.fingerprint}</p>}
    </div>
  );
}

function CallInspector(props: { call: CallItem; runStart: number; onStep: (index: number) => void }) {
  const { call } = props;
  return (
    <div>
      <p><strong>model call</strong> · {call.provider} · {call.model}</p>
      <Started at={call.started_at} runStart={props.runStart} />
      <dl className="facts compact">
        <div><dt>tokens</dt><dd>{fmt.tokens(call.input_tokens)} in · {fmt.tokens(call.output_tokens)} out{call.cache_read_tokens ? ` · ${fmt.tokens(call.cache_read_tokens)} cached` : ""}</dd></div>
        <div><dt>cost</dt><dd>{fmt.money(call.cost_usd)}</dd></div>
        <div><dt>latency</dt><dd>{fmt.duration(call.latency_ms ?? call.duration_ms)}</dd></div>
        <div><dt>status</dt><dd className={call.status === "error" ? "bad" : ""}>{call.status}</dd></div>
        <div><dt>step</dt><dd>{call.step_index === null ? "none" : (
          <button className="linkish" onClick={() => props.onStep(call.step_index!)}>go to step {call.step_index}</button>)}</dd></div>
      </dl>
      {call.error && <pre className="error">{call.error}</pre>}
      <h3>prompt</h3>
      <Messages value={call.input_messages} />
      <h3>response</h3>
      <Messages value={call.output_messages} />
    </div>
  );
}

// Messages as chat turns when they look like [{role, content}], else as JSON.
function Messages(props: { value: unknown }) {
  const { value } = props;
  if (!hasValue(value)) return <p className="muted small">Not recorded (content capture is opt-in in the SDK and the adapters).</p>;
  if (Array.isArray(value) && value.every((turn) => turn && typeof turn === "object" && "role" in turn)) {
    return (
      <ol className="messages">
        {value.map((turn: any, n) => (
          <li key={n}>
            <span className="role">{String(turn.role)}</span>
            <pre>{typeof turn.content === "string" ? turn.content : JSON.stringify(turn.content ?? turn.parts ?? turn, null, 2)}</pre>
          </li>
        ))}
      </ol>
    );
  }
  return <pre className="json">{typeof value === "string" ? value : JSON.stringify(value, null, 2)}</pre>;
}
