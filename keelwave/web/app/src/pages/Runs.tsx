import { useEffect, useState } from "react";
import { Me, agentPath, alertsPath, get } from "../api";
import { useApi } from "../useApi";
import * as fmt from "../format";
import { Link, navigate, usePath } from "../router";
import { Loading, Problem } from "../components/bits";
import { KINDS, LABELS, loopRate } from "../verdict";
import { AlertEvent, Bell } from "../components/alerts";
import { RunRow } from "../components/RunRows";

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
const SINGLE = ["agent_name", ...LOOP_PARAMS, "finding", "status", "termination_reason", "q", "since", "until", "tool"];
const REPEATED = ["tag", "metadata"];
const SEARCH_DELAY_MS = 300;  // search applies this long after the last key

// The sortable columns: the API's sort key, and which way a first click sorts.
const SORTS: Record<string, [string, "asc" | "desc"]> = {
  agent: ["agent_name", "asc"], started: ["started_at", "desc"], duration: ["duration_ms", "desc"],
  steps: ["step_count", "desc"], tokens: ["tokens", "desc"], cost: ["cost_usd", "desc"],
};

export function Runs(props: { me: Me }) {
  const path = usePath();
  const query = new URLSearchParams(path.split("?")[1] ?? "");
  const filters: Record<string, string | string[]> = {};
  for (const name of SINGLE) filters[name] = query.get(name) ?? "";
  for (const name of REPEATED) filters[name] = query.getAll(name);
  const filtered = SINGLE.some((name) => filters[name]) || REPEATED.some((name) => filters[name].length);
  const sort = query.get("sort") ?? "started_at";
  const order = query.get("order") ?? "desc";
  const [cursors, setCursors] = useState<string[]>([]);  // the pages walked so far
  const cursor = cursors.at(-1);
  const [search, setSearch] = useState(filters.q as string);
  const [picked, setPicked] = useState<string[]>([]);
  useEffect(() => { setCursors([]); }, [path]);  // new filters: first page

  const go = (next: URLSearchParams, replace = false) => navigate(`/runs${next.toString() ? `?${next}` : ""}`, replace);
  const setFilter = (name: string, value: string, replace = false) => {
    const next = new URLSearchParams(query);
    if (value) next.set(name, value); else next.delete(name);
    go(next, replace);
  };
  // Search as you type: applied once typing pauses, without a history entry per key.
  useEffect(() => {
    if (search.trim() === (filters.q as string)) return;
    const timer = setTimeout(() => setFilter("q", search.trim(), true), SEARCH_DELAY_MS);
    return () => clearTimeout(timer);
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [search]);
  useEffect(() => { if (document.activeElement?.id !== "run-search") setSearch(filters.q as string); }, [filters.q]);

  // Without filters, runs are grouped: top-level runs, their children under them.
  const grouped = !filtered;
  const runs = useApi<any>(agentPath(props.me, "/runs"),
    { ...filters, sort, order, root: grouped, limit: 50, cursor }, cursor ? undefined : 3000);
  const [agents, setAgents] = useState<string[]>([]);
  useEffect(() => {
    get<any>(agentPath(props.me, "/health"), { window: "30d" })
      .then((answer) => setAgents(answer.data.map((row: any) => row.agent_name).sort()))
      .catch(() => setAgents([]));
  }, [props.me]);

  const setLoopFilter = (choice: string) => {
    const next = new URLSearchParams(query);
    for (const name of LOOP_PARAMS) next.delete(name);
    const [, , name, value] = LOOP_CHOICES.find(([key]) => key === choice)!;
    if (name) next.set(name, value);
    go(next);
  };
  const addValue = (name: string, value: string) => {
    const next = new URLSearchParams(query);
    if (!next.getAll(name).includes(value)) next.append(name, value);
    go(next);
  };
  const removeValue = (name: string, value: string) => {
    const next = new URLSearchParams();
    for (const [key, given] of query) if (!(key === name && given === value)) next.append(key, given);
    go(next);
  };
  const sortBy = (column: string) => {
    const [key, first] = SORTS[column];
    const next = new URLSearchParams(query);
    next.set("sort", key);
    next.set("order", sort === key ? (order === "desc" ? "asc" : "desc") : first);
    go(next);
  };
  const clear = () => {
    const next = new URLSearchParams();
    if (query.get("sort")) { next.set("sort", sort); next.set("order", order); }
    setSearch("");
    go(next);
  };
  const pick = (id: string) => setPicked((now) => now.includes(id) ? now.filter((x) => x !== id) : [...now, id].slice(-2));

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
  const header = (column: string, label: string, numeric = false) => {
    const [key] = SORTS[column];
    const active = sort === key;
    return (
      <th className={numeric ? "num" : undefined} aria-sort={active ? (order === "asc" ? "ascending" : "descending") : "none"}>
        <button className={active ? "sort on" : "sort"} onClick={() => sortBy(column)} title={`sort by ${label}`}>
          {label}{active ? (order === "asc" ? " ▲" : " ▼") : ""}
        </button>
      </th>
    );
  };

  return (
    <section>
      <div className="heading">
        <h1>Runs</h1>
        <span className="muted" title="Runs the agent reported looping or the server found looping">{data.length} shown · loop rate <strong className={rate ? "bad" : ""}>{fmt.rate(rate)}</strong></span>
      </div>
      <div className="filters">
        <input id="run-search" aria-label="Search by run id or agent" placeholder="run id prefix or agent…" value={search}
          aria-describedby="search-hint" onChange={(event) => setSearch(event.target.value)} />
        <select aria-label="Agent" value={filters.agent_name as string} onChange={(event) => setFilter("agent_name", event.target.value)}>
          <option value="">all agents</option>
          {agents.map((agent) => <option key={agent} value={agent}>{agent}</option>)}
        </select>
        <select aria-label="Status" value={filters.status as string} onChange={(event) => setFilter("status", event.target.value)}>
          <option value="">any status</option>
          {["running", "stalled", "finished"].map((s) => <option key={s} value={s}>{s}</option>)}
        </select>
        <select aria-label="Termination reason" value={filters.termination_reason as string} onChange={(event) => setFilter("termination_reason", event.target.value)}>
          <option value="">any ending</option>
          {REASONS.map((r) => <option key={r} value={r}>{r}</option>)}
        </select>
        <select aria-label="Loops" value={loopChoice} onChange={(event) => setLoopFilter(event.target.value)}>
          {LOOP_CHOICES.map(([key, label]) => <option key={key} value={key}>{label}</option>)}
        </select>
        <select aria-label="Finding" value={filters.finding as string} onChange={(event) => setFilter("finding", event.target.value)}>
          <option value="">any finding</option>
          {KINDS.map((kind) => <option key={kind} value={kind}>{LABELS[kind]}</option>)}
        </select>
      </div>
      <div className="filters">
        <DateInput label="From" value={filters.since as string} onChange={(value) => setFilter("since", value)} />
        <DateInput label="To" value={filters.until as string} onChange={(value) => setFilter("until", value)} />
        <AddInput label="Tag" placeholder="tag, then Enter" onAdd={(value) => { addValue("tag", value); return null; }} />
        <AddInput label="Metadata" placeholder="key=value, then Enter" onAdd={(value) => {
          if (!/^[^=]+=/.test(value)) return "write it as key=value";
          addValue("metadata", value);
          return null;
        }} />
      </div>
      <p id="search-hint" className="muted small hint">
        The search matches the start of a run id or part of an agent name, as you type.
        {grouped ? " Child runs are grouped under their parent (▸)." : " Child runs are marked ↳."}
      </p>
      {filtered && (
        <div className="chips" aria-label="Active filters">
          {(filters.tag as string[]).map((tag) => <Chip key={`t${tag}`} label={`tag: ${tag}`} onRemove={() => removeValue("tag", tag)} />)}
          {(filters.metadata as string[]).map((pair) => <Chip key={`m${pair}`} label={`metadata: ${pair}`} onRemove={() => removeValue("metadata", pair)} />)}
          {filters.tool && <Chip label={`tool: ${filters.tool}`} onRemove={() => setFilter("tool", "")} />}
          <button className="ghost small" onClick={clear}>Clear filters</button>
        </div>
      )}
      {picked.length > 0 && (
        <div className="compare-bar" role="group" aria-label="Compare runs">
          <span>{picked.length === 1 ? "Pick one more run to compare with " : "Compare "}{picked.map(fmt.shortId).join(" and ")}</span>
          <button disabled={picked.length < 2} onClick={() => navigate(`/compare?a=${picked[0]}&b=${picked[1]}`)}>Compare</button>
          <button className="ghost small" onClick={() => setPicked([])}>Clear</button>
        </div>
      )}
      {runs.error ? <Problem message={runs.error} /> : !runs.data ? <Loading /> : !data.length ? (
        filtered || cursor ? (
          <p className="muted pad empty">No run matches these filters. <button className="ghost small" onClick={clear}>Clear filters</button></p>
        ) : <p className="muted pad empty">No runs yet. Send some with <code>keelwave demo</code>, or point an agent's SDK at this server.</p>
      ) : (
        <div className="scroll">
          <table className="runs">
            <thead><tr>
              <th className="pick"><span className="sr-only">compare</span></th><th>run</th>{header("agent", "agent")}{header("started", "started")}
              {header("duration", "duration", true)}{header("steps", "steps", true)}<th>status</th><th></th>
              {header("tokens", "tokens", true)}{header("cost", "cost", true)}<th>tags</th>
            </tr></thead>
            <tbody>
              {data.map((run) => <RunRow key={run.id} me={props.me} run={run} fired={fired} picked={picked} onPick={pick} grouped={grouped} />)}
            </tbody>
          </table>
          <p className="legend" aria-label="Legend">
            <span className="badge loop">LOOP</span> the run loops — <em>agent</em>: the agent reported it · <em>server</em>: the
            server found it in the run's steps · <em>agent + server</em>: both. Red is a loop; <span className="warn">amber a
            warning that is not one</span> (≈ near-duplicate calls, ∅ no progress). <Bell title="fired an alert" /> the run fired
            an alert (<Link to="/alerts">Alerts</Link>). Tick two runs to compare them.
          </p>
        </div>
      )}
      <div className="pager">
        <button className="ghost" disabled={!cursors.length} onClick={() => setCursors(cursors.slice(0, -1))}>← Back</button>
        <button className="ghost" disabled={!runs.data?.next_cursor} onClick={() => setCursors([...cursors, runs.data.next_cursor])}>More →</button>
      </div>
    </section>
  );
}

function Chip(props: { label: string; onRemove: () => void }) {
  return (
    <span className="chip">
      {props.label} <button className="chip-x" aria-label={`remove ${props.label}`} onClick={props.onRemove}>×</button>
    </span>
  );
}

// A text box whose value is added as a filter on Enter; onAdd returns a complaint or null.
function AddInput(props: { label: string; placeholder: string; onAdd: (value: string) => string | null }) {
  const [value, setValue] = useState("");
  const [problem, setProblem] = useState<string | null>(null);
  return (
    <span className="add-input">
      <input aria-label={props.label} placeholder={props.placeholder} value={value} aria-invalid={!!problem}
        className={problem ? "invalid" : undefined}
        onChange={(event) => { setValue(event.target.value); setProblem(null); }}
        onKeyDown={(event) => {
          if (event.key !== "Enter" || !value.trim()) return;
          const complaint = props.onAdd(value.trim());
          setProblem(complaint);
          if (!complaint) setValue("");
        }} />
      {problem && <span className="error small" role="alert">{props.label}: {problem}</span>}
    </span>
  );
}

// A moment in the browser's time zone; the URL keeps it as ISO 8601 (UTC).
function DateInput(props: { label: string; value: string; onChange: (iso: string) => void }) {
  const local = props.value ? toLocalInput(props.value) : "";
  return (
    <label className="date-input">
      <span className="muted small">{props.label.toLowerCase()}</span>
      <input type="datetime-local" aria-label={props.label} value={local}
        onChange={(event) => props.onChange(event.target.value ? new Date(event.target.value).toISOString() : "")} />
    </label>
  );
}

function toLocalInput(iso: string): string {
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return "";
  const pad = (n: number) => String(n).padStart(2, "0");
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}T${pad(date.getHours())}:${pad(date.getMinutes())}`;
}
