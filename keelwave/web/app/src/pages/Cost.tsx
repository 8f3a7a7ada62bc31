// Where the money goes: cost by model or by agent, in total and over time
// (GET …/agent/cost). Plain SVG, like the Overview's chart.
import { useState } from "react";
import { Me, agentPath } from "../api";
import { useApi } from "../useApi";
import * as fmt from "../format";
import { Link } from "../router";
import { Loading, Problem, ShareBar } from "../components/bits";

const WINDOWS: [string, number, "hour" | "day"][] = [["24h", 86400, "hour"], ["7d", 7 * 86400, "day"], ["30d", 30 * 86400, "day"]];
// Categories, not verdicts: blues, violets and teals, never the red, amber or green
// that mean a loop, a warning or a clean run elsewhere in the dashboard.
const PALETTE = ["#4c6fd6", "#8a63d2", "#2a9d9f", "#6d8fb3", "#b07cc6", "#3f7f8c"];
const OTHER = "#9aa0a8";
const SHOWN = PALETTE.length;

type Total = { key: string; cost_usd: number; input_tokens: number; output_tokens: number; calls: number };
type Point = { bucket_start: string; key: string; cost_usd: number };

export function Cost(props: { me: Me }) {
  const [window, setWindow] = useState("7d");
  const [groupBy, setGroupBy] = useState<"model" | "agent">("model");
  const [seconds, bucket] = (() => { const [, s, b] = WINDOWS.find(([w]) => w === window)!; return [s, b]; })();
  // The window ends at the next whole minute, so a refresh asks the same question.
  const [until] = useState(() => new Date(Math.ceil(Date.now() / 60000) * 60000));
  const since = new Date(until.getTime() - seconds * 1000);
  const cost = useApi<any>(agentPath(props.me, "/cost"),
    { since: since.toISOString(), until: until.toISOString(), bucket, group_by: groupBy });

  return (
    <section>
      <div className="heading">
        <h1>Cost</h1>
        <div className="segmented" role="group" aria-label="Group by">
          {(["model", "agent"] as const).map((g) => (
            <button key={g} className={g === groupBy ? "on" : ""} aria-pressed={g === groupBy} onClick={() => setGroupBy(g)}>by {g}</button>))}
        </div>
        <div className="segmented" role="group" aria-label="Time window">
          {WINDOWS.map(([w]) => (
            <button key={w} className={w === window ? "on" : ""} aria-pressed={w === window} onClick={() => setWindow(w)}>{w}</button>))}
        </div>
      </div>
      <p className="muted">What the model calls of the runs cost, {fmt.whenShort(since.toISOString())} to {fmt.whenShort(until.toISOString())}.
        Calls of models without a known price count their tokens but no cost.</p>
      {cost.error ? <Problem message={cost.error} /> : !cost.data ? <Loading /> :
        <CostView data={cost.data.data} groupBy={groupBy} since={since} until={until} bucket={bucket} />}
    </section>
  );
}

function CostView(props: { data: { totals: Total[]; series: Point[] }; groupBy: string; since: Date; until: Date; bucket: "hour" | "day" }) {
  const totals = [...props.data.totals].sort((x, y) => y.cost_usd - x.cost_usd);
  if (!totals.length) return <p className="muted pad empty">No model calls in this window.</p>;
  const sum = totals.reduce((total, row) => total + row.cost_usd, 0);
  const colour = new Map(totals.slice(0, SHOWN).map((row, n) => [row.key, PALETTE[n]]));
  return (
    <>
      <div className="cards">
        <div className="card stat"><div className="muted small">Cost</div><div className="value">{fmt.money(sum)}</div></div>
        <div className="card stat"><div className="muted small">Model calls</div><div className="value">{totals.reduce((n, row) => n + row.calls, 0)}</div></div>
        <div className="card stat"><div className="muted small">Tokens</div><div className="value">{fmt.tokens(totals.reduce((n, row) => n + row.input_tokens + row.output_tokens, 0))}</div></div>
      </div>
      <h2>Over time</h2>
      <CostChart series={props.data.series} colour={colour} since={props.since} until={props.until} bucket={props.bucket} />
      <h2>By {props.groupBy}</h2>
      <div className="scroll">
        <table aria-label={`Cost by ${props.groupBy}`} className="cost-table">
          <thead><tr><th>{props.groupBy}</th><th className="num">cost</th><th className="barcell">share</th><th className="num">calls</th><th className="num">input tokens</th><th className="num">output tokens</th></tr></thead>
          <tbody>{totals.map((row) => (
            <tr key={row.key}>
              <td><span className="swatch" ref={(el) => { if (el) el.style.background = colour.get(row.key) ?? OTHER; }} />
                {props.groupBy === "agent" ? <Link to={`/runs?agent_name=${encodeURIComponent(row.key)}`}>{row.key}</Link> : row.key}</td>
              <td className="num">{fmt.money(row.cost_usd)}</td>
              <td className="barcell"><ShareBar value={row.cost_usd} max={sum} label={`${row.key}: ${fmt.money(row.cost_usd)} of ${fmt.money(sum)}`} /></td>
              <td className="num">{row.calls}</td>
              <td className="num">{fmt.tokens(row.input_tokens)}</td>
              <td className="num">{fmt.tokens(row.output_tokens)}</td>
            </tr>))}</tbody>
        </table>
      </div>
    </>
  );
}

function CostChart(props: { series: Point[]; colour: Map<string, string>; since: Date; until: Date; bucket: "hour" | "day" }) {
  const step = props.bucket === "hour" ? 3600_000 : 86400_000;
  const first = Math.floor(props.since.getTime() / step) * step;
  const buckets: number[] = [];
  for (let at = first; at < props.until.getTime(); at += step) buckets.push(at);
  const stacks = new Map<number, Map<string, number>>();
  for (const point of props.series) {
    const at = Math.floor(new Date(point.bucket_start).getTime() / step) * step;
    const key = props.colour.has(point.key) ? point.key : "other";
    const stack = stacks.get(at) ?? new Map<string, number>();
    stack.set(key, (stack.get(key) ?? 0) + point.cost_usd);
    stacks.set(at, stack);
  }
  const heightOf = (at: number) => [...(stacks.get(at)?.values() ?? [])].reduce((a, b) => a + b, 0);
  const max = Math.max(...buckets.map(heightOf), 0) || 1;
  const width = 900, height = 180, pad = 24;
  const slot = (width - pad) / Math.max(1, buckets.length), bar = Math.max(1, slot * 0.8);
  const scale = (height - 2 * pad) / max;
  const label = (at: number) => props.bucket === "day"
    ? new Date(at).toLocaleDateString([], { month: "short", day: "numeric" })
    : new Date(at).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  const every = Math.max(1, Math.ceil(buckets.length / 8));
  const keys = [...props.colour.keys(), "other"];
  return (
    <figure className="chart">
      <svg viewBox={`0 0 ${width} ${height}`} role="img" aria-label="Cost over time">
        <line x1={pad} x2={width} y1={height - pad} y2={height - pad} className="axis" />
        <text x={0} y={pad - 8} className="tick">{fmt.money(max)}</text>
        {buckets.map((at, i) => {
          const x = pad + i * slot;
          let top = height - pad;
          const stack = stacks.get(at);
          return (
            <g key={at}>
              <title>{`${label(at)}: ${fmt.money(heightOf(at))}${stack ? " — " + [...stack].map(([k, v]) => `${k} ${fmt.money(v)}`).join(", ") : ""}`}</title>
              <rect x={x} y={pad} width={bar} height={height - 2 * pad} className="slot" />
              {keys.filter((key) => stack?.get(key)).map((key) => {
                const h = Math.max(1, stack!.get(key)! * scale);
                top -= h;
                return <rect key={key} x={x} y={top} width={bar} height={h} fill={props.colour.get(key) ?? OTHER} />;
              })}
              {i % every === 0 && <text x={x} y={height - 6} className="tick">{label(at)}</text>}
            </g>
          );
        })}
      </svg>
      <figcaption className="legend">
        {[...props.colour].map(([key, colour]) => (
          <span key={key}><span className="key" ref={(el) => { if (el) el.style.background = colour; }} /> {key}</span>))}
        {props.series.some((point) => !props.colour.has(point.key)) && <span><span className="key other" /> other</span>}
      </figcaption>
    </figure>
  );
}
