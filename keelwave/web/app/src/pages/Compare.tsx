// Two runs side by side (GET …/runs/compare?a=&b=): their steps aligned (the same tool
// and input, a changed input, a changed output, a step only one of them took) and what
// each cost, with the difference B − A.
import { Fragment, useState } from "react";
import { Me, agentPath } from "../api";
import { useApi } from "../useApi";
import * as fmt from "../format";
import { Link, navigate, usePath } from "../router";
import { Loading, Problem, Status } from "../components/bits";

type Diff = "same" | "changed_input" | "changed_output" | "only_a" | "only_b";
type Pair = { status: Diff; a: any | null; b: any | null };

export const DIFF_LABELS: Record<Diff, string> = {
  same: "same", changed_input: "changed input", changed_output: "changed output", only_a: "only in A", only_b: "only in B",
};
const TOTALS: [string, string, "count" | "money" | "ms"][] = [
  ["step_count", "steps", "count"], ["llm_calls", "model calls", "count"], ["input_tokens", "input tokens", "count"],
  ["output_tokens", "output tokens", "count"], ["cost_usd", "cost", "money"], ["duration_ms", "duration", "ms"],
];

export function Compare(props: { me: Me }) {
  const path = usePath();
  const query = new URLSearchParams(path.split("?")[1] ?? "");
  const a = query.get("a") ?? "", b = query.get("b") ?? "";
  const ready = !!a && !!b;
  const compared = useApi<any>(ready ? agentPath(props.me, "/runs/compare") : null, { a, b });

  if (!ready) return <PickTwo a={a} b={b} />;
  if (compared.error) return <section><Heading /><Problem message={compared.error} /><PickTwo a={a} b={b} /></section>;
  if (!compared.data) return <section><Heading /><Loading /></section>;
  const { data } = compared.data;
  const pairs: Pair[] = data.steps;
  const counts = new Map<Diff, number>();
  for (const pair of pairs) counts.set(pair.status, (counts.get(pair.status) ?? 0) + 1);
  return (
    <section className="compare">
      <Heading>
        <button className="ghost" onClick={() => navigate(`/compare?a=${b}&b=${a}`)}>Swap A and B</button>
      </Heading>
      {data.a.agent_name !== data.b.agent_name && (
        <p className="note">These are runs of two agents ({data.a.agent_name} and {data.b.agent_name}): their steps may have little in common.</p>)}
      <div className="columns even">
        <RunCard label="A" run={data.a} />
        <RunCard label="B" run={data.b} />
      </div>
      <h2>Totals</h2>
      <div className="scroll">
        <table className="totals" aria-label="Totals">
          <thead><tr><th></th><th className="num">A</th><th className="num">B</th><th className="num">B − A</th></tr></thead>
          <tbody>{TOTALS.filter(([key]) => data.totals[key]).map(([key, label, unit]) => {
            const row = data.totals[key];
            const show = (value: number | null) => unit === "money" ? fmt.money(value) : unit === "ms" ? fmt.duration(value) : fmt.tokens(value ?? 0);
            return (
              <tr key={key}>
                <td>{label}</td><td className="num">{show(row.a)}</td><td className="num">{show(row.b)}</td>
                <td className={`num delta ${row.delta > 0 ? "up" : row.delta < 0 ? "down" : ""}`}>{fmt.delta(row.delta, unit)}</td>
              </tr>
            );
          })}</tbody>
        </table>
      </div>
      <h2>Steps <span className="muted small">aligned {data.aligned === "lcs" ? "by their longest common sequence of calls" : "greedily (the runs are long)"}</span></h2>
      <p className="diff-counts" aria-label="Step differences">
        {(Object.keys(DIFF_LABELS) as Diff[]).map((kind) => (
          <span key={kind} className={`diff ${kind}`}><strong>{counts.get(kind) ?? 0}</strong> {DIFF_LABELS[kind]}</span>))}
      </p>
      {!pairs.length ? <p className="muted">Neither run recorded a step.</p> : <>
        <p className="muted small">Click a pair to see both steps' input and output.</p>
        <StepPairs pairs={pairs} />
      </>}
    </section>
  );
}

function Heading(props: { children?: React.ReactNode }) {
  return (
    <>
      <p><Link to="/runs">← Runs</Link></p>
      <div className="heading"><h1>Compare runs</h1>{props.children}</div>
    </>
  );
}

function RunCard(props: { label: string; run: any }) {
  const { run } = props;
  return (
    <div className="card run-card" aria-label={`Run ${props.label}`}>
      <div className="muted small">Run {props.label}</div>
      <div className="value"><Link to={`/runs/${run.id}`} className="mono">{fmt.shortId(run.id)}</Link> {run.agent_name}</div>
      <div className="small"><Status run={run} /> · {fmt.whenShort(run.started_at)} · {fmt.duration(run.duration_ms)}</div>
      {run.error && <div className="small error">{run.error}</div>}
    </div>
  );
}

const label = (step: any) => (step ? `${step.step_index} ${step.tool_name ?? step.step_type}` : "");
const brief = (value: unknown) => {
  if (value === null || value === undefined) return "";
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return text.length > 80 ? `${text.slice(0, 79)}…` : text;
};

function StepPairs(props: { pairs: Pair[] }) {
  const [open, setOpen] = useState<number | null>(null);
  return (
    <div className="scroll">
      <table className="step-pairs" aria-label="Aligned steps">
        <thead><tr><th>difference</th><th>A</th><th>B</th><th>input</th></tr></thead>
        <tbody>{props.pairs.map((pair, n) => (
          <Fragment key={n}>
            <tr className={`pair ${pair.status}`} aria-expanded={open === n} tabIndex={0}
              onClick={() => setOpen(open === n ? null : n)}
              onKeyDown={(event) => { if (event.key === "Enter" || event.key === " ") { event.preventDefault(); setOpen(open === n ? null : n); } }}>
              <td><span className={`diff ${pair.status}`}>{DIFF_LABELS[pair.status] ?? pair.status}</span></td>
              <td className={pair.a?.error ? "bad" : undefined}>{label(pair.a)}</td>
              <td className={pair.b?.error ? "bad" : undefined}>{label(pair.b)}</td>
              <td className="mono small brief">{pair.status === "changed_input"
                ? <>{brief(pair.a?.tool_input)} <span className="muted">→</span> {brief(pair.b?.tool_input)}</>
                : brief((pair.a ?? pair.b)?.tool_input)}</td>
            </tr>
            {open === n && (
              <tr className="pair-detail"><td colSpan={4}>
                <div className="columns even">
                  <StepSide label="A" step={pair.a} />
                  <StepSide label="B" step={pair.b} />
                </div>
              </td></tr>
            )}
          </Fragment>
        ))}</tbody>
      </table>
    </div>
  );
}

function StepSide(props: { label: string; step: any | null }) {
  const { step } = props;
  if (!step) return <div><h3>{props.label}</h3><p className="muted">no such step in run {props.label}</p></div>;
  return (
    <div>
      <h3>{props.label}: step {step.step_index} · {step.tool_name ?? step.step_type} · {fmt.duration(step.duration_ms)}</h3>
      {step.error && <pre className="error">{step.error}</pre>}
      {step.tool_input !== undefined && step.tool_input !== null && <><h3>input</h3><pre className="json">{JSON.stringify(step.tool_input, null, 2)}</pre></>}
      {step.tool_output !== undefined && step.tool_output !== null && <><h3>output</h3><pre className="json">{JSON.stringify(step.tool_output, null, 2)}</pre></>}
      {step.content && <><h3>content</h3><pre>{step.content}</pre></>}
    </div>
  );
}

// Without two runs: how to pick them, and two boxes for their ids.
function PickTwo(props: { a: string; b: string }) {
  const [a, setA] = useState(props.a), [b, setB] = useState(props.b);
  return (
    <section>
      {!props.a && !props.b && <Heading />}
      <p className="muted">Tick two runs in the <Link to="/runs">Runs</Link> list, choose “Compare with…” on a run's page, or give two run ids.</p>
      <form className="filters" onSubmit={(event) => { event.preventDefault(); navigate(`/compare?a=${a.trim()}&b=${b.trim()}`); }}>
        <input aria-label="Run A" placeholder="run A id" value={a} onChange={(event) => setA(event.target.value)} />
        <input aria-label="Run B" placeholder="run B id" value={b} onChange={(event) => setB(event.target.value)} />
        <button type="submit" disabled={!a.trim() || !b.trim()}>Compare</button>
      </form>
    </section>
  );
}
