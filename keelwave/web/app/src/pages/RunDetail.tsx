import { useEffect, useState } from "react";
import { Me, agentPath, alertsPath, get } from "../api";
import { useApi } from "../useApi";
import * as fmt from "../format";
import { Band, Step, bandLabel, findingsOf, fold, isLoopBand, markText, nameOf } from "../timeline";
import { Link } from "../router";
import { Loading, LoopBadge, Problem, Status } from "../components/bits";
import { AlertEvent, Bell, DeliveryCell, EventState, EventValue, When } from "../components/alerts";
import { Finding, LABELS, SYMBOLS, beganAt, isLoopKind, kinds, loops, who } from "../verdict";

export function RunDetail(props: { me: Me; runId: string }) {
  const run = useApi<any>(agentPath(props.me, `/runs/${props.runId}`), {});
  const calls = useApi<any>(agentPath(props.me, `/runs/${props.runId}/llm`), {});
  const found = useApi<{ data: Finding[] }>(agentPath(props.me, `/runs/${props.runId}/findings`), {});
  const findings: Finding[] = found.data?.data ?? [];
  // The alerts this run fired; looked at again every few seconds while the page is open.
  const alerts = useApi<{ data: AlertEvent[] }>(alertsPath(props.me, "/events"), { run_id: props.runId }, 5000);
  const fired: AlertEvent[] = alerts.data?.data ?? [];
  const [steps, setSteps] = useState<Step[] | null>(null);
  const [stepsError, setStepsError] = useState<string | null>(null);
  const [selected, setSelected] = useState<Step | null>(null);

  useEffect(() => {
    let cancelled = false;
    setSteps(null);
    setSelected(null);
    (async () => {
      const all: Step[] = [];
      let cursor: string | undefined;
      do {
        const page = await get<any>(agentPath(props.me, `/runs/${props.runId}/steps`), { limit: 5000, cursor });
        all.push(...page.data);
        cursor = page.next_cursor ?? undefined;
      } while (cursor);
      if (!cancelled) setSteps(all);
    })().catch((error: Error) => !cancelled && setStepsError(error.message));
    return () => { cancelled = true; };
  }, [props.runId, props.me]);

  if (run.error) return <Problem message={run.error} />;
  if (!run.data) return <Loading />;
  const r = run.data.data;
  return (
    <section>
      <p><Link to="/runs">← Runs</Link></p>
      <div className="heading">
        <h1>{r.agent_name} <LoopBadge run={r} /></h1>
        <span className="mono muted">{r.id}</span>
      </div>
      <dl className="facts">
        <div><dt>status</dt><dd><Status run={r} /></dd></div>
        <div><dt>termination</dt><dd>{r.termination_reason ?? "—"}</dd></div>
        <div><dt>loop began at</dt><dd className={loops(r) ? "bad" : ""}><LoopBegan run={r} /></dd></div>
        <div><dt>findings</dt><dd>{kinds(r).length ? kinds(r).map((kind, n) => (
          <span key={kind} className={isLoopKind(kind) ? "bad" : "warn"}>{n ? ", " : ""}{LABELS[kind]}</span>)) : "none"}</dd></div>
        <div><dt>duration</dt><dd>{fmt.duration(r.duration_ms)}</dd></div>
        <div><dt>steps</dt><dd>{r.step_count}</dd></div>
        <div><dt>tokens</dt><dd>{fmt.tokens(r.input_tokens)} in · {fmt.tokens(r.output_tokens)} out</dd></div>
        <div><dt>cost</dt><dd>{fmt.money(r.cost_usd)}</dd></div>
        <div><dt>started</dt><dd title={r.started_at}>{fmt.ago(r.started_at)}</dd></div>
        <div><dt>alerts</dt><dd>{alerts.error ? <span className="muted" title={alerts.error}>—</span> : !alerts.data ? "…" : fired.length ? (
          <Link to={`/alerts?run_id=${r.id}`} className="fired"><Bell title="this run fired an alert" /> {fired.length} fired</Link>) : "none"}</dd></div>
      </dl>
      {r.error && <p className="error">{r.error}</p>}
      {(r.parent_run_id || r.child_runs.length > 0) && (
        <p className="related">
          {r.parent_run_id && <>Parent: <Link to={`/runs/${r.parent_run_id}`} className="mono">{fmt.shortId(r.parent_run_id)}</Link> </>}
          {r.child_runs.length > 0 && <>Children: {r.child_runs.map((child: string) => (
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
        <div>
          <h2>Timeline</h2>
          {stepsError ? <Problem message={stepsError} /> : !steps || !found.data ? <Loading /> : !steps.length ? <p className="muted">No steps recorded.</p> :
            <>
              <ol className="timeline">{fold(steps, findings).map((band) => (
                <BandRow key={band.steps[0].step_index} band={band} selected={selected} onSelect={setSelected} />))}</ol>
              <Legend />
            </>}
        </div>
        <aside className="inspector" aria-label="Step inspector">
          <h2>Step</h2>
          {selected ? <Inspector step={selected} findings={findings} /> : <p className="muted">Select a step to see its input and output.</p>}
        </aside>
      </div>
      <h2>Model calls</h2>
      {calls.error ? <Problem message={calls.error} /> : !calls.data ? <Loading /> : !calls.data.data.length ? <p className="muted">No model calls.</p> : (
        <div className="scroll">
          <table>
            <thead><tr><th className="num">step</th><th>provider</th><th>model</th><th className="num">in</th><th className="num">out</th><th className="num">cached</th><th className="num">latency</th><th className="num">cost</th><th>status</th></tr></thead>
            <tbody>{calls.data.data.map((call: any) => (
              <tr key={call.id}>
                <td className="num">{call.step_index ?? "—"}</td><td>{call.provider}</td><td>{call.model}</td>
                <td className="num">{fmt.tokens(call.input_tokens)}</td><td className="num">{fmt.tokens(call.output_tokens)}</td>
                <td className="num">{fmt.tokens(call.cache_read_tokens)}</td><td className="num">{fmt.duration(call.latency_ms)}</td>
                <td className="num">{fmt.money(call.cost_usd)}</td>
                <td className={call.status === "error" ? "bad" : ""} title={call.error ?? ""}>{call.status}</td>
              </tr>))}</tbody>
          </table>
        </div>
      )}
    </section>
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

function Legend() {
  return (
    <p className="legend" aria-label="Timeline legend">
      <span className="key loops" /> a loop: the same call repeated, or a cycle of calls
      <span className="key warn" /> a warning, not a loop: ≈ near-duplicate calls, ∅ no progress
    </p>
  );
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

function BandRow(props: { band: Band; selected: Step | null; onSelect: (step: Step) => void }) {
  const [open, setOpen] = useState(false);
  const { band } = props;
  const first = band.steps[0], last = band.steps.at(-1)!;
  const errors = band.steps.filter((step) => step.error).length;
  const warned = band.marks.length ? "warned" : "";
  if (!isLoopBand(band)) {
    return (
      <li>
        <button className={`step ${first.in_loop ? "repeat" : ""} ${warned} ${props.selected === first ? "selected" : ""}`} onClick={() => props.onSelect(first)}>
          <span className="idx">{first.step_index}</span>
          <span className="name">{bandLabel(band)}</span>
          {first.in_loop && <span className="hits" title="this input repeats elsewhere in the run">↻ ×{first.loop_hits}</span>}
          <Marks band={band} />
          {errors > 0 && <span className="bad">error</span>}
          <span className="muted dur">{fmt.duration(first.duration_ms)}</span>
        </button>
        <Why band={band} />
      </li>
    );
  }
  return (
    <li className={band.cycle ? "band cycle" : "band"}>
      <button className="step looping" aria-expanded={open} onClick={() => setOpen(!open)} title={band.cycle?.detail}>
        <span className="idx">{first.step_index}–{last.step_index}</span>
        <span className="name">{bandLabel(band)}</span>
        <span className="hits">{band.cycle ? "cycle, " : ""}steps {first.step_index}–{last.step_index}</span>
        <Marks band={band} />
        {errors > 0 && <span className="bad">{errors} errors</span>}
        <span className="muted dur">{open ? "▾" : "▸"}</span>
      </button>
      <Why band={band} />
      {open && (
        <ol>{band.steps.map((step) => (
          <li key={step.step_index}>
            <button className={`step repeat ${props.selected === step ? "selected" : ""}`} onClick={() => props.onSelect(step)}>
              <span className="idx">{step.step_index}</span>
              <span className="name">{nameOf(step)}</span>
              <span className="muted dur">{fmt.duration(step.duration_ms)}</span>
            </button>
          </li>))}</ol>
      )}
    </li>
  );
}

function Inspector(props: { step: Step; findings: Finding[] }) {
  const { step } = props;
  return (
    <div>
      <p><strong>step {step.step_index}</strong> · {step.step_type} · {fmt.duration(step.duration_ms)}</p>
      {step.in_loop && <p className="bad">Same tool, same input: {step.loop_hits} times in this run.</p>}
      {findingsOf(step, props.findings).filter((finding) => finding.kind !== "exact_loop").map((finding) => (
        <p key={finding.kind + finding.began_at_step} className={isLoopKind(finding.kind) ? "bad" : "warn"}>
          {LABELS[finding.kind]}: {finding.detail}.
        </p>))}
      {step.error && <pre className="error">{step.error}</pre>}
      {step.tool_input !== null && step.tool_input !== undefined && <><h3>input</h3><pre className="json">{JSON.stringify(step.tool_input, null, 2)}</pre></>}
      {step.tool_output !== null && step.tool_output !== undefined && <><h3>output</h3><pre className="json">{JSON.stringify(step.tool_output, null, 2)}</pre></>}
      {step.content && <><h3>content</h3><pre>{step.content}</pre></>}
      {step.fingerprint && <p className="muted small mono">fingerprint {step.fingerprint}</p>}
    </div>
  );
}
