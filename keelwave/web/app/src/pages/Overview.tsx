import { useState } from "react";
import { Me, agentPath } from "../api";
import { useApi } from "../useApi";
import * as fmt from "../format";
import { RunsChart } from "../components/Chart";
import { Loading, Problem, ShareBar, endingTone } from "../components/bits";
import { Link } from "../router";
import { KINDS, LABELS, SYMBOLS, isLoopKind } from "../verdict";

const WINDOWS = [["1h", "5m"], ["24h", "1h"], ["7d", "6h"], ["30d", "1d"]] as const;

export function Overview(props: { me: Me }) {
  const [window, setWindow] = useState<string>("24h");
  const bucket = WINDOWS.find(([w]) => w === window)![1];
  const summary = useApi<any>(agentPath(props.me, "/summary"), { window }, 10000);
  const series = useApi<any>(agentPath(props.me, "/runs/timeseries"), { window, bucket }, 10000);
  const ends = useApi<any>(agentPath(props.me, "/runs/terminations"), { window }, 10000);
  const health = useApi<any>(agentPath(props.me, "/health"), { window }, 10000);

  return (
    <section>
      <div className="heading">
        <h1>Overview</h1>
        <div className="segmented" role="group" aria-label="Time window">
          {WINDOWS.map(([w]) => (
            <button key={w} className={w === window ? "on" : ""} aria-pressed={w === window} onClick={() => setWindow(w)}>{w}</button>
          ))}
        </div>
      </div>
      {summary.error ? <Problem message={summary.error} /> : !summary.data ? <Loading /> : <Cards data={summary.data.data} window={window} />}
      <h2>Runs over time</h2>
      {series.error ? <Problem message={series.error} /> : !series.data ? <Loading /> :
        <RunsChart points={series.data.data} bucketSeconds={series.data.bucket_seconds} />}
      <div className="columns">
        <div>
          <h2>How runs ended</h2>
          {ends.error ? <Problem message={ends.error} /> : !ends.data ? <Loading /> : <Terminations rows={ends.data.data} />}
        </div>
        <div className="wide">
          <h2>Agents by loop rate</h2>
          {health.error ? <Problem message={health.error} /> : !health.data ? <Loading /> : <Health rows={health.data.data} />}
        </div>
      </div>
    </section>
  );
}

function Cards(props: { data: any; window: string }) {
  const now = props.data.current, before = props.data.previous;
  const cards: [string, string, string, boolean][] = [
    ["Runs", String(now.runs), fmt.change(now.runs, before.runs), false],
    ["Loop rate", fmt.rate(now.loop_rate), fmt.change(now.loop_rate, before.loop_rate, true), (now.loop_rate ?? 0) > 0],
    ["Detected loop rate", fmt.rate(now.detected_loop_rate), fmt.change(now.detected_loop_rate, before.detected_loop_rate, true), (now.detected_loop_rate ?? 0) > 0],
    ["Error rate", fmt.rate(now.error_rate), fmt.change(now.error_rate, before.error_rate, true), (now.error_rate ?? 0) > 0],
    ["Stalled", String(now.stalled_runs), fmt.change(now.stalled_runs, before.stalled_runs), now.stalled_runs > 0],
    ["p95 duration", fmt.duration(now.p95_duration_ms), fmt.change(now.p95_duration_ms, before.p95_duration_ms), false],
    ["Tokens", fmt.tokens(now.input_tokens + now.output_tokens), fmt.change(now.input_tokens + now.output_tokens, before.input_tokens + before.output_tokens), false],
    ["Cost", fmt.money(now.cost_usd), fmt.change(now.cost_usd, before.cost_usd), false],
  ];
  const hint: Record<string, string> = {
    "Loop rate": "Runs whose agent reported a loop (loop_detected)",
    "Detected loop rate": "Runs in whose steps the server found an exact loop or a cycle",
  };
  return (
    <>
      <div className="cards">
        {cards.map(([label, value, delta, alarm]) => (
          <div className={alarm ? "card stat alarm" : "card stat"} key={label} title={hint[label]}>
            <div className="muted small">{label}</div>
            <div className="value">{value}</div>
            <div className="muted small" title={`against the ${props.window} before`}>{delta}</div>
          </div>
        ))}
      </div>
      <p className="muted small">
        Loop rate: as the agents reported it. Detected loop rate: as the server found it in the runs' steps.
      </p>
      <FindingCounts counts={now.findings} />
    </>
  );
}

// Runs with each kind of finding: red for loops, amber for warnings.
function FindingCounts(props: { counts: Record<string, number> | undefined }) {
  if (!props.counts) return null;
  return (
    <div className="finding-counts" role="group" aria-label="Runs with findings">
      <span className="muted small">Runs with findings</span>
      {KINDS.map((kind) => (
        <span key={kind} className={`count ${isLoopKind(kind) ? "loop" : "warn"}`}>
          <strong>{props.counts![kind] ?? 0}</strong> {SYMBOLS[kind] ? `${SYMBOLS[kind]} ` : ""}{LABELS[kind]}
        </span>
      ))}
      <span className="muted small">red: a loop · amber: a warning, not a loop</span>
    </div>
  );
}

function Terminations(props: { rows: { termination_reason: string | null; count: number }[] }) {
  const total = props.rows.reduce((sum, row) => sum + row.count, 0);
  if (!total) return <p className="muted">No runs in this window.</p>;
  return (
    <table className="mix">
      <tbody>
        {props.rows.filter((row) => row.count > 0).map((row) => (
          <tr key={row.termination_reason ?? "open"}>
            <td>{row.termination_reason ?? "not finished yet"}</td>
            <td className="num">{row.count}</td>
            <td className="barcell"><ShareBar value={row.count} max={total} label={`${row.termination_reason ?? "not finished yet"}: ${row.count} of ${total}`} tone={endingTone(row.termination_reason)} /></td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function Health(props: { rows: any[] }) {
  if (!props.rows.length) return <p className="muted">No runs in this window. Try <code>keelwave demo</code>.</p>;
  return (
    <div className="scroll">
      <table>
        <thead><tr><th>agent</th><th className="num">runs</th><th className="num">loop rate</th><th className="num" title="as the server found it">detected</th><th className="num">error rate</th><th className="num">stalled</th><th className="num">p95</th><th className="num">avg steps</th><th className="num">cost</th><th>last run</th></tr></thead>
        <tbody>
          {props.rows.map((row) => (
            <tr key={row.agent_name}>
              <td><Link to={`/runs?agent_name=${encodeURIComponent(row.agent_name)}`}>{row.agent_name}</Link></td>
              <td className="num">{row.runs}</td>
              <td className={row.loop_rate > 0 ? "num bad" : "num"}>{fmt.rate(row.loop_rate)}</td>
              <td className={row.detected_loop_rate > 0 ? "num bad" : "num"}>{fmt.rate(row.detected_loop_rate)}</td>
              <td className={row.error_rate > 0 ? "num bad" : "num"}>{fmt.rate(row.error_rate)}</td>
              <td className="num">{row.stalled_runs}</td>
              <td className="num">{fmt.duration(row.p95_duration_ms)}</td>
              <td className="num">{row.avg_steps?.toFixed(1) ?? "—"}</td>
              <td className="num">{fmt.money(row.cost_usd)}</td>
              <td title={fmt.when(row.last_run_at)}>{fmt.ago(row.last_run_at)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
