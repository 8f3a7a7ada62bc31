import { useEffect, useState } from "react";
import { Me, agentPath, alertsPath, get } from "../api";
import { useApi } from "../useApi";
import * as fmt from "../format";
import { Link, navigate, usePath } from "../router";
import { Loading, LoopBadge, Problem, Status, WarningBadges } from "../components/bits";
import { KINDS, LABELS, loopRate, loops, source } from "../verdict";
import { AlertEvent, Bell } from "../components/alerts";

const REASONS = ["clean", "max_steps_reached", "context_limit", "error", "loop_detected", "timeout"];
// The loop filter: which account of looping a run must have (the API's three parameters).
const LOOP_CHOICES: [string, string, string, string][] = [
  ["", "loop or not", "", ""],
  ["either", "loops (either)", "loop", "true"],
  ["agent", "loop reported by the agent", "loop_detected", "true"],
  ["server", "loop detected by the server", "detected_loop", "true"],
  ["none", "no loop", "loop", "false"],
];
const LOOP_PARAMS = ["loop", "loop_detected", "detected_loop"];

export function Runs(props: { me: Me }) {
  const path = usePath();
  const query = new URLSearchParams(path.split("?")[1] ?? "");
  const filters = {
    agent_name: query.get("agent_name") ?? "",
    loop: query.get("loop") ?? "",
    loop_detected: query.get("loop_detected") ?? "",
    detected_loop: query.get("detected_loop") ?? "",
    finding: query.get("finding") ?? "",
    status: query.get("status") ?? "",
    termination_reason: query.get("termination_reason") ?? "",
    q: query.get("q") ?? "",
  };
  const [cursors, setCursors] = useState<string[]>([]);  // the pages walked so far
  const cursor = cursors.at(-1);
  const [search, setSearch] = useState(filters.q);
  useEffect(() => { setCursors([]); setSearch(filters.q); }, [path]);  // new filters: first page

  // Only the first page refreshes by itself: new runs appear at its top.
  const runs = useApi<any>(agentPath(props.me, "/runs"), { ...filters, limit: 50, cursor }, cursor ? undefined : 3000);
  const [agents, setAgents] = useState<string[]>([]);
  useEffect(() => {
    get<any>(agentPath(props.me, "/health"), { window: "30d" })
      .then((answer) => setAgents(answer.data.map((row: any) => row.agent_name).sort()))
      .catch(() => setAgents([]));
  }, [props.me]);

  const setFilter = (name: string, value: string) => {
    const next = new URLSearchParams(query);
    if (value) next.set(name, value); else next.delete(name);
    navigate(`/runs${next.toString() ? `?${next}` : ""}`);
  };
  const setLoopFilter = (choice: string) => {
    const next = new URLSearchParams(query);
    for (const name of LOOP_PARAMS) next.delete(name);
    const [, , name, value] = LOOP_CHOICES.find(([key]) => key === choice)!;
    if (name) next.set(name, value);
    navigate(`/runs${next.toString() ? `?${next}` : ""}`);
  };
  const loopChoice = LOOP_CHOICES.find(([key, , name, value]) => key && query.get(name) === value)?.[0] ?? "";
  const data: any[] = runs.data?.data ?? [];
  // Which runs fired an alert: one request for the latest 500 events, not one per row.
  const events = useApi<{ data: AlertEvent[] }>(alertsPath(props.me, "/events"), { limit: 500 }, 10000);
  const fired = new Map<string, string[]>();
  for (const event of events.data?.data ?? []) {
    if (!event.run_id) continue;
    const names = fired.get(event.run_id) ?? [];
    if (!names.includes(event.rule_name)) names.push(event.rule_name);
    fired.set(event.run_id, names);
  }
  const rate = loopRate(data);

  return (
    <section>
      <div className="heading">
        <h1>Runs</h1>
        <span className="muted" title="Runs the agent reported looping or the server found looping">{data.length} shown · loop rate <strong className={rate ? "bad" : ""}>{fmt.rate(rate)}</strong></span>
      </div>
      <form className="filters" onSubmit={(event) => { event.preventDefault(); setFilter("q", search.trim()); }}>
        <input aria-label="Search by run id or agent" placeholder="run id or agent…" value={search} onChange={(event) => setSearch(event.target.value)} />
        <select aria-label="Agent" value={filters.agent_name} onChange={(event) => setFilter("agent_name", event.target.value)}>
          <option value="">all agents</option>
          {agents.map((agent) => <option key={agent} value={agent}>{agent}</option>)}
        </select>
        <select aria-label="Status" value={filters.status} onChange={(event) => setFilter("status", event.target.value)}>
          <option value="">any status</option>
          {["running", "stalled", "finished"].map((s) => <option key={s} value={s}>{s}</option>)}
        </select>
        <select aria-label="Termination reason" value={filters.termination_reason} onChange={(event) => setFilter("termination_reason", event.target.value)}>
          <option value="">any ending</option>
          {REASONS.map((r) => <option key={r} value={r}>{r}</option>)}
        </select>
        <select aria-label="Loops" value={loopChoice} onChange={(event) => setLoopFilter(event.target.value)}>
          {LOOP_CHOICES.map(([key, label]) => <option key={key} value={key}>{label}</option>)}
        </select>
        <select aria-label="Finding" value={filters.finding} onChange={(event) => setFilter("finding", event.target.value)}>
          <option value="">any finding</option>
          {KINDS.map((kind) => <option key={kind} value={kind}>{LABELS[kind]}</option>)}
        </select>
      </form>
      {runs.error ? <Problem message={runs.error} /> : !runs.data ? <Loading /> : !data.length ? (
        <p className="muted pad">No runs match. Send some with <code>keelwave demo</code>.</p>
      ) : (
        <div className="scroll">
          <table className="runs">
            <thead><tr><th>run</th><th>agent</th><th>started</th><th className="num">duration</th><th className="num">steps</th><th>status</th><th></th><th className="num">tokens</th><th className="num">cost</th></tr></thead>
            <tbody>
              {data.map((run) => (
                <tr key={run.id} className={loops(run) ? `looping ${source(run)}` : ""}>
                  <td><Link to={`/runs/${run.id}`} className="mono">{fmt.shortId(run.id)}</Link></td>
                  <td>{run.agent_name}</td>
                  <td title={run.started_at}>{fmt.ago(run.started_at)}</td>
                  <td className="num">{fmt.duration(run.duration_ms)}</td>
                  <td className="num">{run.step_count}</td>
                  <td><Status run={run} /></td>
                  <td><div className="verdicts"><LoopBadge run={run} /><WarningBadges run={run} />{fired.has(run.id) && <Bell title={`fired an alert: ${fired.get(run.id)!.join(", ")}`} />}</div></td>
                  <td className="num">{fmt.tokens(run.input_tokens + run.output_tokens)}</td>
                  <td className="num">{fmt.money(run.cost_usd)}</td>
                </tr>
              ))}
            </tbody>
          </table>
          <p className="legend" aria-label="Legend">
            <span className="badge loop">LOOP</span> the run loops — <em>agent</em>: the agent reported it · <em>server</em>: the
            server found it in the run's steps · <em>agent + server</em>: both. Red is a loop; <span className="warn">amber a
            warning that is not one</span> (≈ near-duplicate calls, ∅ no progress). <Bell title="fired an alert" /> the run fired
            an alert (<Link to="/alerts">Alerts</Link>).
          </p>
        </div>
      )}
      <div className="pager">
        <button className="ghost" disabled={!cursors.length} onClick={() => setCursors(cursors.slice(0, -1))}>← Newer</button>
        <button className="ghost" disabled={!runs.data?.next_cursor} onClick={() => setCursors([...cursors, runs.data.next_cursor])}>Older →</button>
      </div>
    </section>
  );
}
