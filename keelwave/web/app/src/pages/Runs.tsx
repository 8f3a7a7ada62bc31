import { useEffect, useState } from "react";
import { Me, agentPath, get } from "../api";
import { useApi } from "../useApi";
import * as fmt from "../format";
import { Link, navigate, usePath } from "../router";
import { Loading, LoopBadge, Problem, Status } from "../components/bits";

const REASONS = ["clean", "max_steps_reached", "context_limit", "error", "loop_detected", "timeout"];

export function Runs(props: { me: Me }) {
  const path = usePath();
  const query = new URLSearchParams(path.split("?")[1] ?? "");
  const filters = {
    agent_name: query.get("agent_name") ?? "",
    loop_detected: query.get("loop_detected") ?? "",
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
  const data: any[] = runs.data?.data ?? [];
  const looping = data.filter((run) => run.loop_detected).length;

  return (
    <section>
      <div className="heading">
        <h1>Runs</h1>
        <span className="muted">{data.length} shown · loop rate <strong className={looping ? "bad" : ""}>{fmt.rate(data.length ? looping / data.length : null)}</strong></span>
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
        <label className="check"><input type="checkbox" checked={filters.loop_detected === "true"} onChange={(event) => setFilter("loop_detected", event.target.checked ? "true" : "")} /> looping only</label>
      </form>
      {runs.error ? <Problem message={runs.error} /> : !runs.data ? <Loading /> : !data.length ? (
        <p className="muted pad">No runs match. Send some with <code>keelwave demo</code>.</p>
      ) : (
        <div className="scroll">
          <table className="runs">
            <thead><tr><th>run</th><th>agent</th><th>started</th><th className="num">duration</th><th className="num">steps</th><th>status</th><th></th><th className="num">tokens</th><th className="num">cost</th></tr></thead>
            <tbody>
              {data.map((run) => (
                <tr key={run.id} className={run.loop_detected ? "looping" : ""}>
                  <td><Link to={`/runs/${run.id}`} className="mono">{fmt.shortId(run.id)}</Link></td>
                  <td>{run.agent_name}</td>
                  <td title={run.started_at}>{fmt.ago(run.started_at)}</td>
                  <td className="num">{fmt.duration(run.duration_ms)}</td>
                  <td className="num">{run.step_count}</td>
                  <td><Status run={run} /></td>
                  <td>{run.loop_detected && <LoopBadge />}</td>
                  <td className="num">{fmt.tokens(run.input_tokens + run.output_tokens)}</td>
                  <td className="num">{fmt.money(run.cost_usd)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <div className="pager">
        <button className="ghost" disabled={!cursors.length} onClick={() => setCursors(cursors.slice(0, -1))}>← Newer</button>
        <button className="ghost" disabled={!runs.data?.next_cursor} onClick={() => setCursors([...cursors, runs.data.next_cursor])}>Older →</button>
      </div>
    </section>
  );
}
