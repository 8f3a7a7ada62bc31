// Runs per time bucket as bars, loops (as the agents reported them, as the server
// detected them) and errors drawn inside them: loops red, errors a darker red (both went
// wrong; amber is kept for warnings). Plain SVG:
// a chart library would weigh more than the rest of the dashboard.

type Point = { start: string; runs: number; loop_runs: number; detected_loop_runs?: number; error_runs: number };

export function RunsChart(props: { points: Point[]; bucketSeconds: number }) {
  const { points } = props;
  const width = 900, height = 180, pad = 24;
  const max = Math.max(1, ...points.map((p) => p.runs));
  const slot = (width - pad) / Math.max(1, points.length);
  const bar = Math.max(1, slot * 0.8);
  const y = (value: number) => height - pad - (value / max) * (height - 2 * pad);
  const label = (iso: string) => {
    const date = new Date(iso);
    return props.bucketSeconds >= 86400 ? date.toLocaleDateString() : date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  };
  const every = Math.max(1, Math.ceil(points.length / 8));
  return (
    <figure className="chart">
      <svg viewBox={`0 0 ${width} ${height}`} role="img" aria-label="Runs, loops and errors over time">
        <line x1={pad} x2={width} y1={height - pad} y2={height - pad} className="axis" />
        <text x={0} y={pad} className="tick">{max}</text>
        {points.map((p, i) => {
          const x = pad + i * slot;
          return (
            <g key={p.start}>
              <title>{`${label(p.start)}: ${p.runs} runs, ${p.loop_runs} loops reported, ${p.detected_loop_runs ?? 0} detected, ${p.error_runs} errors`}</title>
              <rect x={x} y={y(p.runs)} width={bar} height={height - pad - y(p.runs)} className="bar runs" />
              <rect x={x} y={y(p.loop_runs)} width={bar / 3} height={height - pad - y(p.loop_runs)} className="bar loops" />
              <rect x={x + bar / 3} y={y(p.detected_loop_runs ?? 0)} width={bar / 3} height={height - pad - y(p.detected_loop_runs ?? 0)} className="bar detected" />
              <rect x={x + (2 * bar) / 3} y={y(p.error_runs)} width={bar / 3} height={height - pad - y(p.error_runs)} className="bar errors" />
              {i % every === 0 && <text x={x} y={height - 6} className="tick">{label(p.start)}</text>}
            </g>
          );
        })}
      </svg>
      <figcaption className="legend">
        <span className="key runs" /> runs <span className="key loops" /> loops reported by the agent <span className="key detected" /> loops detected by the server <span className="key errors" /> errors
      </figcaption>
    </figure>
  );
}
