// The waterfall: one line per band of steps, model call or child run, in start order,
// each with its bar on the run's time axis, so steps that ran at once overlap and a
// child run sits where it ran (and opens in place, on the same axis).
import { useEffect, useState } from "react";
import { Me, agentPath, get } from "../api";
import * as fmt from "../format";
import { Band, bandLabel, isLoopBand, markText, nameOf } from "../timeline";
import { Link } from "../router";
import { Finding, SYMBOLS } from "../verdict";
import {
  Axis, CallItem, ChildItem, Item, Row, Selection, StepItem, callKey, endOf, loadTimeline, place, rowsOf, stepKey,
} from "../waterfall";
import { Loading, Problem } from "./bits";

type Props = {
  me: Me; runId: string; items: Item[]; findings: Finding[]; axis: Axis; now: number;
  selected: string | null; onSelect: (selection: Selection) => void; nested?: boolean;
};

export function Waterfall(given: Props) {
  // Only the Props: a nested waterfall is handed its parent row's props too.
  const { me, runId, items, findings, axis, now, selected, onSelect, nested } = given;
  const props: Props = { me, runId, items, findings, axis, now, selected, onSelect, nested };
  const rows = rowsOf(props.items, props.findings, props.now);
  return (
    <ol className={props.nested ? "timeline nested" : "timeline"} aria-label={props.nested ? "Child run timeline" : "Timeline"}>
      {rows.map((row) => <RowLine {...props} key={keyOf(row)} row={row} />)}
    </ol>
  );
}

const keyOf = (row: Row) =>
  row.kind === "band" ? `b${row.band.steps[0].step_index}` : row.kind === "call" ? `c${row.call.id}` : `r${row.child.run_id}`;

function RowLine(props: Props & { row: Row }) {
  const { row } = props;
  if (row.kind === "band") return <BandRow {...props} band={row.band} />;
  if (row.kind === "call") return <CallRow {...props} call={row.call} />;
  return <ChildRow {...props} child={row.child} />;
}

// The scale above the waterfall: its start, middle and end.
export function AxisScale(props: { axis: Axis }) {
  const span = props.axis.end - props.axis.start;
  return (
    <div className="wf-scale" aria-label="Time axis">
      <span className="wf-scale-label muted small">started {fmt.whenShort(new Date(props.axis.start).toISOString())}</span>
      <span className="track">
        {[0, 0.5, 1].map((at) => (
          <span key={at} className="tick" ref={(el) => { if (el) el.style.left = `${at * 100}%`; }}>{fmt.offset(at * span)}</span>
        ))}
      </span>
    </div>
  );
}

// A bar, placed with CSSOM (the page's CSP allows no inline style attributes).
function Bar(props: { axis: Axis; start: number; end: number; tone: string; title: string }) {
  const { left, width } = place(props.axis, props.start, props.end);
  return (
    <span className={`bar ${props.tone}`} title={props.title}
      ref={(el) => { if (el) { el.style.left = `${left}%`; el.style.width = `${width}%`; } }} />
  );
}

function Track(props: { children: React.ReactNode }) {
  return <span className="track" aria-hidden="true">{props.children}</span>;
}

const ms = (iso: string) => new Date(iso).getTime();

function stepTitle(step: StepItem, axis: Axis): string {
  return `step ${step.step_index} ${nameOf(step)}: ${fmt.offset(ms(step.started_at) - axis.start)}, ${fmt.duration(step.duration_ms)} (${fmt.when(step.started_at)})`;
}

function StepBar(props: { step: StepItem; axis: Axis; now: number }) {
  const { step } = props;
  const tone = step.error ? "error" : step.in_loop ? "loop" : "step";
  return <Bar axis={props.axis} start={ms(step.started_at)} end={endOf(step, props.now)} tone={tone} title={stepTitle(step, props.axis)} />;
}

function Marks(props: { band: Band }) {
  return <>{props.band.marks.map((mark) => (
    <span key={mark.finding.kind + mark.finding.began_at_step} className="mark" title={mark.finding.detail}>
      {SYMBOLS[mark.finding.kind]} {markText(mark)}
    </span>))}</>;
}

function Why(props: { band: Band }) {
  const first = props.band.marks.filter((mark) => mark.first);
  return <>{first.map((mark) => (
    <p key={mark.finding.kind + mark.finding.began_at_step} className="why">{SYMBOLS[mark.finding.kind]} {mark.finding.detail}</p>))}</>;
}

function BandRow(props: Props & { band: Band }) {
  const [open, setOpen] = useState(false);
  const { band, axis, runId } = props;
  const steps = band.steps as StepItem[];
  const first = steps[0], last = steps.at(-1)!;
  const errors = steps.filter((step) => step.error).length;
  const warned = band.marks.length ? "warned" : "";
  const select = (step: StepItem) => props.onSelect({ kind: "step", step, key: stepKey(runId, step) });
  const isSelected = (step: StepItem) => props.selected === stepKey(runId, step);
  if (!isLoopBand(band)) {
    return (
      <li>
        <button className={`step ${first.in_loop ? "repeat" : ""} ${warned} ${errors ? "failed" : ""} ${isSelected(first) ? "selected" : ""}`}
          aria-pressed={isSelected(first)} onClick={() => select(first)}>
          <span className="idx">{first.step_index}</span>
          <span className="label">
            <span className="name">{bandLabel(band)}</span>
            {first.in_loop && <span className="hits" title="this input repeats elsewhere in the run">↻ ×{first.loop_hits}</span>}
            <Marks band={band} />
            {errors > 0 && <span className="bad">error</span>}
          </span>
          <span className="muted dur">{fmt.duration(first.duration_ms)}</span>
          <Track><StepBar step={first} axis={axis} now={props.now} /></Track>
        </button>
        <Why band={band} />
      </li>
    );
  }
  return (
    <li className={band.cycle ? "band cycle" : "band"}>
      <button className="step looping" aria-expanded={open} onClick={() => setOpen(!open)} title={band.cycle?.detail}>
        <span className="idx">{first.step_index}–{last.step_index}</span>
        <span className="label">
          <span className="name">{bandLabel(band)}</span>
          <span className="hits">{band.cycle ? "cycle, " : ""}steps {first.step_index}–{last.step_index}</span>
          <Marks band={band} />
          {errors > 0 && <span className="bad">{errors} errors</span>}
        </span>
        <span className="muted dur">{open ? "▾" : "▸"}</span>
        <Track>{steps.map((step) => <StepBar key={step.step_index} step={step} axis={axis} now={props.now} />)}</Track>
      </button>
      <Why band={band} />
      {open && (
        <ol>{steps.map((step) => (
          <li key={step.step_index}>
            <button className={`step repeat ${step.error ? "failed" : ""} ${isSelected(step) ? "selected" : ""}`} aria-pressed={isSelected(step)} onClick={() => select(step)}>
              <span className="idx">{step.step_index}</span>
              <span className="label"><span className="name">{nameOf(step)}</span>{step.error && <span className="bad">error</span>}</span>
              <span className="muted dur">{fmt.duration(step.duration_ms)}</span>
              <Track><StepBar step={step} axis={axis} now={props.now} /></Track>
            </button>
          </li>))}</ol>
      )}
    </li>
  );
}

function CallRow(props: Props & { call: CallItem }) {
  const { call, axis } = props;
  const key = callKey(call);
  const failed = call.status === "error";
  const start = ms(call.started_at), end = endOf(call, props.now);
  return (
    <li className="wf-call">
      <button className={`step call ${failed ? "failed" : ""} ${props.selected === key ? "selected" : ""}`} aria-pressed={props.selected === key}
        onClick={() => props.onSelect({ kind: "call", call, key })}>
        <span className="idx" title="a model call">llm</span>
        <span className="label">
          <span className="name">{call.model}</span>
          {failed && <span className="bad">error</span>}
          {call.step_index !== null && <span className="muted small of-step">of step {call.step_index}</span>}
          <span className="muted small">{call.provider} · {fmt.tokens(call.input_tokens)} → {fmt.tokens(call.output_tokens)} tokens · {fmt.money(call.cost_usd)}</span>
        </span>
        <span className="muted dur">{fmt.duration(end - start)}</span>
        <Track><Bar axis={axis} start={start} end={end} tone={failed ? "error" : "call"}
          title={`${call.model}: ${fmt.offset(start - axis.start)}, ${fmt.duration(end - start)} (${fmt.when(call.started_at)})`} /></Track>
      </button>
    </li>
  );
}

function ChildRow(props: Props & { child: ChildItem }) {
  const [open, setOpen] = useState(false);
  const { child, axis } = props;
  const start = ms(child.started_at), end = endOf(child, props.now);
  const failed = child.termination_reason === "error";
  const ending = child.status === "finished" ? child.termination_reason ?? "finished" : child.status;
  return (
    <li className="wf-child">
      <button className={`step child ${failed ? "failed" : ""}`} aria-expanded={open} onClick={() => setOpen(!open)}>
        <span className="idx" title="a child run">↳</span>
        <span className="label">
          <span className="name">{child.agent_name}</span>
          <span className={`small ${failed ? "bad" : "muted"}`}>child run · {ending} · {child.step_count} {child.step_count === 1 ? "step" : "steps"}</span>
        </span>
        <span className="muted dur">{open ? "▾ " : "▸ "}{fmt.duration(end - start)}</span>
        <Track><Bar axis={axis} start={start} end={end} tone={failed ? "error" : "child"}
          title={`${child.agent_name}: ${fmt.offset(start - axis.start)}, ${fmt.duration(end - start)} (${fmt.when(child.started_at)})`} /></Track>
      </button>
      <p className="wf-open small"><Link to={`/runs/${child.run_id}`}>open {child.agent_name} →</Link></p>
      {open && <ChildTimeline {...props} child={child} />}
    </li>
  );
}

// A child run's own timeline, loaded when it is opened, drawn on the parent's axis.
function ChildTimeline(props: Props & { child: ChildItem }) {
  const [items, setItems] = useState<Item[] | null>(null);
  const [findings, setFindings] = useState<Finding[]>([]);
  const [error, setError] = useState<string | null>(null);
  const id = props.child.run_id;
  useEffect(() => {
    let cancelled = false;
    Promise.all([
      get<any>(agentPath(props.me, `/runs/${id}`)),
      get<{ data: Finding[] }>(agentPath(props.me, `/runs/${id}/findings`)).catch(() => ({ data: [] })),
    ]).then(async ([run, found]) => {
      const loaded = await loadTimeline(props.me, id, run.data.child_runs ?? []);
      if (!cancelled) { setItems(loaded); setFindings(found.data); }
    }).catch((problem: Error) => !cancelled && setError(problem.message));
    return () => { cancelled = true; };
  }, [id, props.me]);
  if (error) return <Problem message={error} />;
  if (!items) return <Loading />;
  if (!items.length) return <p className="muted small wf-empty">This child run recorded no steps.</p>;
  return <Waterfall {...props} runId={id} items={items} findings={findings} nested />;
}

export function Legend() {
  return (
    <p className="legend" aria-label="Timeline legend">
      <span className="key loops" /> a loop: the same call repeated, or a cycle of calls
      <span className="key warn" /> a warning, not a loop: ≈ near-duplicate calls, ∅ no progress
      <span className="key k-step" /> a step <span className="key k-call" /> a model call <span className="key k-child" /> a child run
      <span className="key k-error" /> an error
    </p>
  );
}
