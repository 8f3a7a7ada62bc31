import { useEffect, useRef, useState } from "react";
import { Me, agentPath, alertsPath } from "../api";
import { useApi } from "../useApi";
import * as fmt from "../format";
import { Link, navigate } from "../router";
import { Loading, LoopBadge, Problem, Status } from "../components/bits";
import { AlertEvent, Bell, DeliveryCell, EventState, EventValue, When } from "../components/alerts";
import { AxisScale, Legend, Waterfall } from "../components/Waterfall";
import { Inspector, Traceback } from "../components/Inspector";
import { Finding, LABELS, SYMBOLS, beganAt, isLoopKind, kinds, loops, who } from "../verdict";
import { CallItem, Item, Selection, StepItem, axisOf, callKey, failingStep, loadTimeline, rowsOf, stepKey } from "../waterfall";

const LIVE_MS = 3000;  // how often a running run is read again

export function RunDetail(props: { me: Me; runId: string }) {
  const [running, setRunning] = useState(false);
  const run = useApi<any>(agentPath(props.me, `/runs/${props.runId}`), {}, running ? LIVE_MS : undefined);
  const found = useApi<{ data: Finding[] }>(agentPath(props.me, `/runs/${props.runId}/findings`), {}, running ? LIVE_MS : undefined);
  const findings: Finding[] = found.data?.data ?? [];
  // The alerts this run fired; looked at again every few seconds while the page is open.
  const alerts = useApi<{ data: AlertEvent[] }>(alertsPath(props.me, "/events"), { run_id: props.runId }, 5000);
  const fired: AlertEvent[] = alerts.data?.data ?? [];
  const [items, setItems] = useState<Item[] | null>(null);
  const [itemsError, setItemsError] = useState<string | null>(null);
  const [selected, setSelected] = useState<Selection | null>(null);
  const [now, setNow] = useState(Date.now());
  const opened = useRef<string | null>(null);  // the run whose failing step was selected on opening
  const r = run.data?.data;
  const childRuns: string[] = r?.child_runs ?? [];

  useEffect(() => { setItems(null); setSelected(null); setItemsError(null); opened.current = null; }, [props.runId]);
  useEffect(() => { if (r) setRunning(r.status === "running"); }, [r?.status]);

  // The timeline, once the run is known; while it runs, the run is read every few
  // seconds and the timeline again whenever the run has moved (a new step or call, a
  // child run, its end), so it grows without re-reading a quiet run's pages.
  const moved = r ? [r.last_activity_at, r.step_count, r.llm_calls, r.ended_at, childRuns.join(",")].join("|") : null;
  useEffect(() => {
    if (!r) return;
    let cancelled = false;
    loadTimeline(props.me, props.runId, childRuns)
      .then((loaded) => { if (!cancelled) { setItems(loaded); setItemsError(null); setNow(Date.now()); } })
      .catch((error: Error) => !cancelled && setItemsError(error.message));
    return () => { cancelled = true; };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [props.runId, props.me, moved]);

  // A running run's elapsed time ticks every second.
  useEffect(() => {
    if (!running) return;
    const timer = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(timer);
  }, [running]);

  // A failed run opens on its failing step, with its traceback in the inspector.
  useEffect(() => {
    if (!r || !items || opened.current === props.runId) return;
    opened.current = props.runId;
    const failing = (r.termination_reason === "error" || r.error) ? failingStep(items) : null;
    if (failing) {
      setSelected({ kind: "step", step: failing, key: stepKey(props.runId, failing) });
      requestAnimationFrame(() => document.querySelector(".timeline .step.selected")?.scrollIntoView({ block: "nearest" }));
    }
  }, [items, r, props.runId]);

  if (run.error) return <Problem message={run.error} />;
  if (!r) return <Loading />;
  const rows = items ? rowsOf(items, findings, now) : [];
  const axis = axisOf(r, rows, now);
  const selectStep = (index: number) => {
    const step = items?.find((item): item is StepItem => item.kind === "step" && item.step_index === index);
    if (step) setSelected({ kind: "step", step, key: stepKey(props.runId, step) });
  };
  return (
    <section>
      <p><Link to="/runs">← Runs</Link></p>
      <div className="heading">
        <h1>{r.agent_name} <LoopBadge run={r} /></h1>
        <span className="mono muted">{r.id}</span>
        <CompareWith me={props.me} run={r} />
      </div>
      <dl className="facts">
        <div><dt>status</dt><dd><Status run={r} /></dd></div>
        <div><dt>termination</dt><dd>{r.termination_reason ?? "—"}</dd></div>
        <div><dt>loop began at</dt><dd className={loops(r) ? "bad" : ""}><LoopBegan run={r} /></dd></div>
        <div><dt>findings</dt><dd>{kinds(r).length ? kinds(r).map((kind, n) => (
          <span key={kind} className={isLoopKind(kind) ? "bad" : "warn"}>{n ? ", " : ""}{LABELS[kind]}</span>)) : "none"}</dd></div>
        <div><dt>started</dt><dd><time dateTime={r.started_at}>{fmt.when(r.started_at)}</time> <span className="muted small ago">{fmt.ago(r.started_at)}</span></dd></div>
        <div><dt>ended</dt><dd>{r.ended_at ? <time dateTime={r.ended_at}>{fmt.when(r.ended_at)}</time> : <span className="muted">not yet</span>}</dd></div>
        <div><dt>duration</dt><dd>{r.ended_at ? fmt.duration(r.duration_ms) : <span className="running-for">{r.status} for {fmt.duration(now - new Date(r.started_at).getTime())}</span>}</dd></div>
        <div><dt>steps</dt><dd>{r.step_count}</dd></div>
        <div><dt>tokens</dt><dd>{fmt.tokens(r.input_tokens)} in · {fmt.tokens(r.output_tokens)} out</dd></div>
        <div><dt>cost</dt><dd>{fmt.money(r.cost_usd)} <span className="muted small">{r.llm_calls} {r.llm_calls === 1 ? "model call" : "model calls"}</span></dd></div>
        <div><dt>alerts</dt><dd>{alerts.error ? <span className="muted" title={alerts.error}>—</span> : !alerts.data ? "…" : fired.length ? (
          <Link to={`/alerts?run_id=${r.id}`} className="fired"><Bell title="this run fired an alert" /> {fired.length} fired</Link>) : "none"}</dd></div>
        <div><dt>tags</dt><dd>{r.tags?.length ? r.tags.map((tag: string) => (
          <Link key={tag} to={`/runs?tag=${encodeURIComponent(tag)}`} className="chip">{tag}</Link>)) : <span className="muted">none</span>}</dd></div>
      </dl>
      {r.error && <div className="run-error"><p className="error">{r.error}</p><Traceback text={r.error_traceback} open={false} /></div>}
      {(r.parent_run_id || childRuns.length > 0) && (
        <p className="related">
          {r.parent_run_id && <>Parent: <Link to={`/runs/${r.parent_run_id}`} className="mono">{fmt.shortId(r.parent_run_id)}</Link> </>}
          {childRuns.length > 0 && <>Children: {childRuns.map((child: string) => (
            <Link key={child} to={`/runs/${child}`} className="mono child">{fmt.shortId(child)}</Link>))}</>}
        </p>
      )}
      <section aria-label="Findings">
        <h2>Findings</h2>
        {found.error ? <Problem message={found.error} /> : !found.data ? <Loading /> : <Findings findings={findings} />}
      </section>
      {fired.length > 0 && (
        <section aria-label="Alerts">
          <h2>Alerts <Link to={`/alerts?run_id=${r.id}`} className="small">on the Alerts page →</Link></h2>
          <RunAlerts events={fired} />
        </section>
      )}
      <div className="split">
        <div className="wf">
          <h2>Timeline <span className="muted small">steps, model calls and child runs on one time axis</span></h2>
          {itemsError ? <Problem message={itemsError} /> : !items || !found.data ? <Loading /> : !items.length ?
            <p className="muted">No steps recorded{running ? " yet: this run is still going, and its steps appear here as they arrive" : ""}.</p> :
            <>
              <AxisScale axis={axis} />
              <Waterfall me={props.me} runId={props.runId} items={items} findings={findings} axis={axis} now={now}
                selected={selected?.key ?? null} onSelect={setSelected} />
              <Legend />
            </>}
        </div>
        <aside className="inspector" aria-label="Step inspector">
          <h2>{selected?.kind === "call" ? "Model call" : "Step"}</h2>
          <Inspector selection={selected} findings={findings} runStart={axis.start} onStep={selectStep}
            calls={(items ?? []).filter((item): item is CallItem => item.kind === "model_call")}
            onCall={(call) => setSelected({ kind: "call", call, key: callKey(call) })} />
        </aside>
      </div>
      <RunData run={r} />
    </section>
  );
}

// What the run was given, what it returned, and what it was labelled with.
function RunData(props: { run: any }) {
  const parts: [string, unknown][] = [["input", props.run.input], ["output", props.run.output], ["metadata", props.run.metadata]];
  return (
    <section aria-label="Run data" className="run-data">
      <h2>Input, output and metadata</h2>
      <div className="columns three">
        {parts.map(([name, value]) => (
          <div key={name}>
            <h3>{name}</h3>
            {value === null || value === undefined ? <p className="muted small">none recorded</p> :
              <pre className="json" aria-label={`run ${name}`}>{JSON.stringify(value, null, 2)}</pre>}
          </div>
        ))}
      </div>
    </section>
  );
}

// "Compare with…": another recent run of the same agent.
function CompareWith(props: { me: Me; run: any }) {
  const others = useApi<any>(agentPath(props.me, "/runs"), { agent_name: props.run.agent_name, limit: 20 });
  const choices = (others.data?.data ?? []).filter((other: any) => other.id !== props.run.id);
  if (!choices.length) return null;
  return (
    <select aria-label="Compare with" className="compare-with" value="" onChange={(event) => event.target.value && navigate(`/compare?a=${props.run.id}&b=${event.target.value}`)}>
      <option value="">Compare with…</option>
      {choices.map((other: any) => (
        <option key={other.id} value={other.id}>{fmt.shortId(other.id)} · {fmt.whenShort(other.started_at)} · {other.termination_reason ?? other.status}</option>
      ))}
    </select>
  );
}

function RunAlerts(props: { events: AlertEvent[] }) {
  return (
    <ul className="run-alerts">
      {props.events.map((event) => (
        <li key={event.id} className={`run-alert ${event.state}`}>
          <EventState state={event.state} />
          <strong>{event.rule_name}</strong>
          <EventValue event={event} />
          <When at={event.fired_at} />
          <DeliveryCell delivery={event.delivery} />
        </li>
      ))}
    </ul>
  );
}

// "step 3" and who says so; "—" when neither the agent nor the server says the run loops.
function LoopBegan(props: { run: any }) {
  if (!loops(props.run)) return <>—</>;
  const step = beganAt(props.run);
  return <>{step !== null ? <span>step {step}</span> : <span>yes</span>} <span className="who">{who(props.run)}</span></>;
}

function Findings(props: { findings: Finding[] }) {
  if (!props.findings.length) return <p className="muted">The server finds no repetition in this run's steps.</p>;
  return (
    <ul className="findings">
      {props.findings.map((finding) => {
        const loop = isLoopKind(finding.kind);
        return (
          <li key={`${finding.kind}-${finding.step_indices.join(",")}`} className={loop ? "finding loop" : "finding warn"}>
            <span className={loop ? "badge loop" : "badge warn"}>{SYMBOLS[finding.kind] ? `${SYMBOLS[finding.kind]} ` : ""}{LABELS[finding.kind] ?? finding.kind}</span>
            <span className="from">from step {finding.began_at_step}</span>
            <span className="detail">{finding.detail}</span>
            <span className="muted small">steps {finding.step_indices.join(", ")}</span>
          </li>
        );
      })}
    </ul>
  );
}
