import { useEffect, useState } from "react";
import { Me, agentPath, get } from "../api";
import { useApi } from "../useApi";
import * as fmt from "../format";
import { Band, Step, bandLabel, fold } from "../timeline";
import { Link } from "../router";
import { Loading, LoopBadge, Problem, Status } from "../components/bits";

export function RunDetail(props: { me: Me; runId: string }) {
  const run = useApi<any>(agentPath(props.me, `/runs/${props.runId}`), {});
  const calls = useApi<any>(agentPath(props.me, `/runs/${props.runId}/llm`), {});
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
        <h1>{r.agent_name} {r.loop_detected && <LoopBadge />}</h1>
        <span className="mono muted">{r.id}</span>
      </div>
      <dl className="facts">
        <div><dt>status</dt><dd><Status run={r} /></dd></div>
        <div><dt>termination</dt><dd>{r.termination_reason ?? "—"}</dd></div>
        <div><dt>loop began at</dt><dd className={r.loop_detected ? "bad" : ""}>{r.loop_step_index ? `step ${r.loop_step_index}` : "—"}</dd></div>
        <div><dt>duration</dt><dd>{fmt.duration(r.duration_ms)}</dd></div>
        <div><dt>steps</dt><dd>{r.step_count}</dd></div>
        <div><dt>tokens</dt><dd>{fmt.tokens(r.input_tokens)} in · {fmt.tokens(r.output_tokens)} out</dd></div>
        <div><dt>cost</dt><dd>{fmt.money(r.cost_usd)}</dd></div>
        <div><dt>started</dt><dd title={r.started_at}>{fmt.ago(r.started_at)}</dd></div>
      </dl>
      {r.error && <p className="error">{r.error}</p>}
      {(r.parent_run_id || r.child_runs.length > 0) && (
        <p className="related">
          {r.parent_run_id && <>Parent: <Link to={`/runs/${r.parent_run_id}`} className="mono">{fmt.shortId(r.parent_run_id)}</Link> </>}
          {r.child_runs.length > 0 && <>Children: {r.child_runs.map((child: string) => (
            <Link key={child} to={`/runs/${child}`} className="mono child">{fmt.shortId(child)}</Link>))}</>}
        </p>
      )}
      <div className="split">
        <div>
          <h2>Timeline</h2>
          {stepsError ? <Problem message={stepsError} /> : !steps ? <Loading /> : !steps.length ? <p className="muted">No steps recorded.</p> :
            <ol className="timeline">{fold(steps).map((band) => (
              <BandRow key={band.steps[0].step_index} band={band} selected={selected} onSelect={setSelected} />))}</ol>}
        </div>
        <aside className="inspector" aria-label="Step inspector">
          <h2>Step</h2>
          {selected ? <Inspector step={selected} /> : <p className="muted">Select a step to see its input and output.</p>}
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

function BandRow(props: { band: Band; selected: Step | null; onSelect: (step: Step) => void }) {
  const [open, setOpen] = useState(false);
  const { band } = props;
  const first = band.steps[0], last = band.steps.at(-1)!;
  const errors = band.steps.filter((step) => step.error).length;
  if (band.steps.length === 1) {
    return (
      <li>
        <button className={`step ${first.in_loop ? "repeat" : ""} ${props.selected === first ? "selected" : ""}`} onClick={() => props.onSelect(first)}>
          <span className="idx">{first.step_index}</span>
          <span className="name">{bandLabel(band)}</span>
          {first.in_loop && <span className="hits" title="this input repeats elsewhere in the run">↻ ×{first.loop_hits}</span>}
          {errors > 0 && <span className="bad">error</span>}
          <span className="muted dur">{fmt.duration(first.duration_ms)}</span>
        </button>
      </li>
    );
  }
  return (
    <li className="band">
      <button className="step looping" aria-expanded={open} onClick={() => setOpen(!open)}>
        <span className="idx">{first.step_index}–{last.step_index}</span>
        <span className="name">{bandLabel(band)}</span>
        <span className="hits">steps {first.step_index}–{last.step_index}</span>
        {errors > 0 && <span className="bad">{errors} errors</span>}
        <span className="muted dur">{open ? "▾" : "▸"}</span>
      </button>
      {open && (
        <ol>{band.steps.map((step) => (
          <li key={step.step_index}>
            <button className={`step repeat ${props.selected === step ? "selected" : ""}`} onClick={() => props.onSelect(step)}>
              <span className="idx">{step.step_index}</span>
              <span className="name">{step.tool_name}</span>
              <span className="muted dur">{fmt.duration(step.duration_ms)}</span>
            </button>
          </li>))}</ol>
      )}
    </li>
  );
}

function Inspector(props: { step: Step }) {
  const { step } = props;
  return (
    <div>
      <p><strong>step {step.step_index}</strong> · {step.step_type} · {fmt.duration(step.duration_ms)}</p>
      {step.in_loop && <p className="bad">Same tool, same input: {step.loop_hits} times in this run.</p>}
      {step.error && <pre className="error">{step.error}</pre>}
      {step.tool_input !== null && step.tool_input !== undefined && <><h3>input</h3><pre className="json">{JSON.stringify(step.tool_input, null, 2)}</pre></>}
      {step.tool_output !== null && step.tool_output !== undefined && <><h3>output</h3><pre className="json">{JSON.stringify(step.tool_output, null, 2)}</pre></>}
      {step.content && <><h3>content</h3><pre>{step.content}</pre></>}
      {step.fingerprint && <p className="muted small mono">fingerprint {step.fingerprint}</p>}
    </div>
  );
}
