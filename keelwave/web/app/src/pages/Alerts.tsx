// Alerts: what fired (events, refreshed every few seconds), the rules that fire them and
// the destinations they go to. Making or changing needs a key of scope 'all'; a 'read'
// key sees everything and is told plainly when it tries to change something.
import { Fragment, useEffect, useState } from "react";
import { ApiError, Me, agentPath, alertsPath, get, send } from "../api";
import { useApi } from "../useApi";
import * as fmt from "../format";
import { Link, usePath } from "../router";
import { Loading, Problem } from "../components/bits";
import {
  AlertEvent, Attempts, Condition, DeliveryState, Destination, EventState, EventValue, FINDING_KINDS, RUN_METRICS, Rule,
  TERMINATION_REASONS, WINDOWS, WINDOW_METRICS, When, conditionWords, scopeWords,
} from "../components/alerts";

type Refusal = { message: string; field: string | null };

// What went wrong, said so a person knows what to do: a read key's 403 says which key is
// needed; a 422 keeps the server's message and the field it is about.
function refusal(error: unknown): Refusal {
  if (error instanceof ApiError) {
    if (error.status === 403) {
      return {
        message: `Not allowed: ${error.message}. Making, changing or deleting alerts needs a key of scope 'all': sign in with one to do this.`,
        field: null,
      };
    }
    return { message: error.message, field: error.field };
  }
  return { message: (error as Error).message ?? String(error), field: null };
}

function Refused(props: { refusal: Refusal | null }) {
  if (!props.refusal) return null;
  return <p className="error refusal" role="alert">{props.refusal.message}</p>;
}

// The props that mark an input the server refused.
function invalid(refused: Refusal | null, ...fields: string[]) {
  const bad = !!refused?.field && fields.some((field) => refused.field === field || refused.field!.startsWith(`${field}.`));
  return bad ? { "aria-invalid": true as const, className: "invalid" } : {};
}

export function Alerts(props: { me: Me }) {
  const { me } = props;
  const path = usePath();
  const runFilter = new URLSearchParams(path.split("?")[1] ?? "").get("run_id") ?? "";
  const destinations = useApi<{ data: Destination[] }>(alertsPath(me, "/destinations"), {});
  const rules = useApi<{ data: Rule[] }>(alertsPath(me, "/rules"), {});
  const events = useApi<{ data: AlertEvent[] }>(alertsPath(me, "/events"), { run_id: runFilter, limit: 100 }, 3000);
  const reloadAll = () => { destinations.reload(); rules.reload(); };
  const destinationList = destinations.data?.data ?? [];
  const ruleList = rules.data?.data ?? [];

  return (
    <section className="alerts">
      <div className="heading">
        <h1>Alerts</h1>
        <span className="muted">A rule watches runs (or a window of them) and sends what fires to a destination.</span>
      </div>
      {me.scope !== "all" && (
        <p className="note" role="note">
          This key has scope <code>{me.scope}</code>: you can see alerts, but making, changing or deleting them needs a
          key of scope <code>all</code>.
        </p>
      )}

      <section aria-label="Events">
        <h2>Events {runFilter && <span className="muted small">for run <span className="mono">{fmt.shortId(runFilter)}</span> · <Link to="/alerts">show all</Link></span>}</h2>
        {events.error ? <Problem message={events.error} /> : !events.data ? <Loading /> :
          <Events events={events.data.data} rules={ruleList} filtered={!!runFilter} />}
      </section>

      <section aria-label="Rules">
        <h2>Rules</h2>
        {rules.error ? <Problem message={rules.error} /> : !rules.data || !destinations.data ? <Loading /> :
          <Rules me={me} rules={ruleList} destinations={destinationList} onChange={rules.reload} />}
        {destinations.data && <RuleForm me={me} destinations={destinationList} onMade={rules.reload} />}
      </section>

      <section aria-label="Destinations">
        <h2>Destinations</h2>
        {destinations.error ? <Problem message={destinations.error} /> : !destinations.data || !rules.data ? <Loading /> :
          <Destinations me={me} destinations={destinationList} rules={ruleList} onChange={reloadAll} />}
        <DestinationForm me={me} onMade={destinations.reload} />
      </section>
    </section>
  );
}

// -- events ---------------------------------------------------------------------------

function Events(props: { events: AlertEvent[]; rules: Rule[]; filtered: boolean }) {
  const [open, setOpen] = useState<Set<string>>(new Set());
  if (!props.events.length) {
    return <p className="muted">{props.filtered ? "No alert fired for this run." : "Nothing has fired yet."}</p>;
  }
  const rules = new Map(props.rules.map((rule) => [rule.id, rule]));
  const toggle = (id: string) => {
    const next = new Set(open);
    if (next.has(id)) next.delete(id); else next.add(id);
    setOpen(next);
  };
  return (
    <div className="scroll">
      <table className="events">
        <thead><tr><th>when</th><th>rule</th><th>state</th><th>agent</th><th>run</th><th>value vs threshold</th><th>delivery</th></tr></thead>
        <tbody>
          {props.events.map((event) => {
            const expanded = open.has(event.id);
            const count = event.delivery.attempts.length;
            return (
              <Fragment key={event.id}>
              <tr className={`event ${event.state}`}>
                <td><When at={event.fired_at} /></td>
                <td>{event.rule_name}</td>
                <td><EventState state={event.state} /></td>
                <td>{event.agent_name ?? <span className="muted">every agent</span>}</td>
                <td>{event.run_id ? <Link to={`/runs/${event.run_id}`} className="mono">{fmt.shortId(event.run_id)}</Link> : "—"}</td>
                <td><EventValue event={event} rule={event.rule_id ? rules.get(event.rule_id) : undefined} /></td>
                <td>
                  <DeliveryState delivery={event.delivery} />{" "}
                  <button className="ghost small" aria-expanded={expanded} onClick={() => toggle(event.id)}
                    aria-label={`${count} delivery attempt${count === 1 ? "" : "s"} of ${event.rule_name}`}>
                    {count} attempt{count === 1 ? "" : "s"} {expanded ? "▾" : "▸"}
                  </button>
                </td>
              </tr>
              {expanded && (
                <tr className="attempts-row">
                  <td colSpan={7}><Attempts delivery={event.delivery} /></td>
                </tr>
              )}
              </Fragment>
            );
          })}
        </tbody>
      </table>
      <p className="legend">
        Refreshed every few seconds. <span className="alert-state firing">firing</span> the condition holds ·{" "}
        <span className="alert-state resolved">resolved</span> a window came back · delivery{" "}
        <span className="delivery delivered">delivered</span>, <span className="delivery pending">pending</span> (retried
        for an hour), <span className="delivery failed">failed</span>.
      </p>
    </div>
  );
}

// An inline "are you sure": the button turns into the question, with Yes and Cancel.
function Confirm(props: { label: string; question: string; confirm: string; onConfirm: () => Promise<void> | void; busy?: boolean }) {
  const [asking, setAsking] = useState(false);
  if (!asking) return <button className="ghost" aria-label={props.label} disabled={props.busy} onClick={() => setAsking(true)}>Delete</button>;
  return (
    <span className="confirm" role="group" aria-label={props.label}>
      <span>{props.question}</span>{" "}
      <button disabled={props.busy} onClick={async () => { await props.onConfirm(); setAsking(false); }}>{props.confirm}</button>{" "}
      <button className="ghost" onClick={() => setAsking(false)}>Cancel</button>
    </span>
  );
}

// -- rules ----------------------------------------------------------------------------

function Rules(props: { me: Me; rules: Rule[]; destinations: Destination[]; onChange: () => void }) {
  const [busy, setBusy] = useState<string | null>(null);
  const [problems, setProblems] = useState<Record<string, Refusal>>({});
  if (!props.rules.length) return <p className="muted">No rules yet: make one below.</p>;
  const destinations = new Map(props.destinations.map((destination) => [destination.id, destination]));

  const act = async (rule: Rule, work: () => Promise<unknown>) => {
    setBusy(rule.id);
    try {
      await work();
      setProblems(({ [rule.id]: _, ...rest }) => rest);
      props.onChange();
    } catch (error) {
      setProblems((known) => ({ ...known, [rule.id]: refusal(error) }));
    } finally {
      setBusy(null);
    }
  };
  const path = (rule: Rule) => alertsPath(props.me, `/rules/${rule.id}`);

  return (
    <div className="scroll">
      <table className="rules">
        <thead><tr><th>name</th><th>condition</th><th>agent</th><th>destination</th><th>cooldown</th><th>state</th><th></th></tr></thead>
        <tbody>
          {props.rules.map((rule) => (
            <tr key={rule.id} className={rule.enabled ? "rule" : "rule paused"}>
              <td><strong>{rule.name}</strong></td>
              <td>{conditionWords(rule.condition)}</td>
              <td>{rule.scope.agent_name ?? <span className="muted">{scopeWords(rule)}</span>}</td>
              <td>{destinations.get(rule.destination_id)?.name ?? <span className="muted">—</span>}</td>
              <td title={`${rule.cooldown_seconds} s`}>{fmt.span(rule.cooldown_seconds)}</td>
              <td>{rule.enabled ? <span className="rule-state on">on</span> : <span className="rule-state paused">paused</span>}</td>
              <td className="actions">
                <button className="ghost" disabled={busy === rule.id} aria-label={`${rule.enabled ? "Pause" : "Resume"} ${rule.name}`}
                  onClick={() => act(rule, () => send("PATCH", path(rule), { enabled: !rule.enabled }))}>
                  {rule.enabled ? "Pause" : "Resume"}
                </button>{" "}
                <Confirm label={`Delete rule ${rule.name}`} question={`Delete rule “${rule.name}”?`} confirm="Yes, delete"
                  busy={busy === rule.id} onConfirm={() => act(rule, () => send("DELETE", path(rule)))} />
                <Refused refusal={problems[rule.id] ?? null} />
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

function toggled(list: string[], item: string): string[] {
  return list.includes(item) ? list.filter((x) => x !== item) : [...list, item];
}

const number = (text: string): number | undefined => (text.trim() === "" ? undefined : Number(text));

function RuleForm(props: { me: Me; destinations: Destination[]; onMade: () => void }) {
  const [name, setName] = useState("");
  const [destination, setDestination] = useState("");
  const [type, setType] = useState<Condition["type"]>("run");
  const [runMetric, setRunMetric] = useState("steps");
  const [above, setAbove] = useState("");
  const [kinds, setKinds] = useState<string[]>(["exact_loop", "cycle"]);
  const [reasons, setReasons] = useState<string[]>(["error"]);
  const [windowMetric, setWindowMetric] = useState("error_rate");
  const [window, setWindow] = useState("1h");
  const [direction, setDirection] = useState<"above" | "below">("above");
  const [threshold, setThreshold] = useState("");
  const [agent, setAgent] = useState("");
  const [cooldown, setCooldown] = useState("0");
  const [agents, setAgents] = useState<string[]>([]);
  const [refused, setRefused] = useState<Refusal | null>(null);
  const [made, setMade] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  useEffect(() => {
    get<any>(agentPath(props.me, "/health"), { window: "30d" })
      .then((answer) => setAgents(answer.data.map((row: any) => row.agent_name).sort()))
      .catch(() => setAgents([]));
  }, [props.me]);
  // The first destination by default, and never one that was deleted.
  useEffect(() => {
    if (!props.destinations.some((d) => d.id === destination)) setDestination(props.destinations[0]?.id ?? "");
  }, [props.destinations, destination]);

  const condition = (): Record<string, unknown> => {
    switch (type) {
      case "run": return { type, metric: runMetric, above: number(above) };
      case "finding": return { type, kinds };
      case "termination": return { type, reasons };
      case "stalled": return { type };
      case "window": return { type, metric: windowMetric, window, [direction]: number(threshold) };
    }
  };

  async function submit(event: React.FormEvent) {
    event.preventDefault();
    setBusy(true);
    setRefused(null);
    setMade(null);
    try {
      const answer = await send<{ data: Rule }>("POST", alertsPath(props.me, "/rules"), {
        name: name.trim(),
        destination_id: destination || undefined,
        condition: condition(),
        scope: agent.trim() ? { agent_name: agent.trim() } : {},
        cooldown_seconds: number(cooldown) ?? 0,
      });
      setMade(`Rule “${answer.data.name}” made: ${conditionWords(answer.data.condition)}.`);
      setName("");
      props.onMade();
    } catch (error) {
      setRefused(refusal(error));
    } finally {
      setBusy(false);
    }
  }

  return (
    <form className="card alert-form" aria-label="New rule" onSubmit={submit}>
      <h3>New rule</h3>
      <div className="fields">
        <label>Name<input value={name} onChange={(e) => setName(e.target.value)} placeholder="budget" {...invalid(refused, "name")} /></label>
        <label>Destination
          <select value={destination} onChange={(e) => setDestination(e.target.value)} {...invalid(refused, "destination_id")}>
            {!props.destinations.length && <option value="">no destinations yet: add one below</option>}
            {props.destinations.map((d) => <option key={d.id} value={d.id}>{d.name} ({d.kind})</option>)}
          </select>
        </label>
        <label>Condition
          <select value={type} onChange={(e) => setType(e.target.value as Condition["type"])}>
            <option value="run">a run goes over a number</option>
            <option value="finding">the server finds a loop or warning on a run</option>
            <option value="termination">a run ends for a reason</option>
            <option value="stalled">a run stalls</option>
            <option value="window">a metric over a window of runs</option>
          </select>
        </label>
      </div>
      <div className="fields condition">
        {type === "run" && <>
          <label>Run metric
            <select value={runMetric} onChange={(e) => setRunMetric(e.target.value)}>
              {RUN_METRICS.map((m) => <option key={m} value={m}>{m}</option>)}
            </select>
          </label>
          <label>Above<input type="number" step="any" min="0" value={above} onChange={(e) => setAbove(e.target.value)} placeholder="50" {...invalid(refused, "condition.above")} /></label>
        </>}
        {type === "finding" && (
          <fieldset {...invalid(refused, "condition.kinds")}>
            <legend>Finding kinds</legend>
            {FINDING_KINDS.map((kind) => (
              <label key={kind} className="check"><input type="checkbox" checked={kinds.includes(kind)} onChange={() => setKinds(toggled(kinds, kind))} />{kind}</label>
            ))}
          </fieldset>
        )}
        {type === "termination" && (
          <fieldset {...invalid(refused, "condition.reasons")}>
            <legend>Termination reasons</legend>
            {TERMINATION_REASONS.map((reason) => (
              <label key={reason} className="check"><input type="checkbox" checked={reasons.includes(reason)} onChange={() => setReasons(toggled(reasons, reason))} />{reason}</label>
            ))}
          </fieldset>
        )}
        {type === "stalled" && <p className="muted small">Fires once per run that has been silent for the server's stall time (<code>KEELWAVE_STALL_AFTER_SECONDS</code>) without finishing.</p>}
        {type === "window" && <>
          <label>Window metric
            <select value={windowMetric} onChange={(e) => { setWindowMetric(e.target.value); if (e.target.value !== "runs") setDirection("above"); }}>
              {WINDOW_METRICS.map((m) => <option key={m} value={m}>{m}</option>)}
            </select>
          </label>
          <label>Window
            <select value={window} onChange={(e) => setWindow(e.target.value)}>
              {WINDOWS.map((w) => <option key={w} value={w}>{w}</option>)}
            </select>
          </label>
          <label>Direction
            <select value={direction} onChange={(e) => setDirection(e.target.value as "above" | "below")}>
              <option value="above">above</option>
              <option value="below" disabled={windowMetric !== "runs"}>below (runs only)</option>
            </select>
          </label>
          <label>Threshold<input type="number" step="any" min="0" value={threshold} onChange={(e) => setThreshold(e.target.value)} placeholder={windowMetric.endsWith("rate") ? "0.2" : "1"} {...invalid(refused, "condition.above", "condition.below")} /></label>
        </>}
      </div>
      <div className="fields">
        <label>Agent
          <input list="alert-agents" value={agent} onChange={(e) => setAgent(e.target.value)} placeholder="every agent" {...invalid(refused, "scope")} />
          <datalist id="alert-agents">{agents.map((a) => <option key={a} value={a} />)}</datalist>
        </label>
        <label>Cooldown (seconds)
          <input type="number" min="0" step="1" value={cooldown} onChange={(e) => setCooldown(e.target.value)} {...invalid(refused, "cooldown_seconds")} />
        </label>
        <span className="muted small hint">{(number(cooldown) ?? 0) > 0 ? `at most once per agent every ${fmt.span(number(cooldown) ?? 0)}` : "no cooldown: fires every time"}</span>
      </div>
      <div className="submit">
        <button type="submit" disabled={busy}>{busy ? "Adding…" : "Add rule"}</button>
        <Refused refusal={refused} />
        {made && <p className="good" role="status">{made}</p>}
      </div>
    </form>
  );
}

// -- destinations ---------------------------------------------------------------------

type TestResult = { delivered: boolean; status: number | null; error: string | null; duration_ms: number | null };

function Destinations(props: { me: Me; destinations: Destination[]; rules: Rule[]; onChange: () => void }) {
  const [busy, setBusy] = useState<string | null>(null);
  const [tests, setTests] = useState<Record<string, TestResult>>({});
  const [problems, setProblems] = useState<Record<string, Refusal>>({});
  if (!props.destinations.length) return <p className="muted">No destinations yet: add a webhook or a Slack incoming webhook below.</p>;

  const act = async (destination: Destination, work: () => Promise<void>) => {
    setBusy(destination.id);
    setProblems(({ [destination.id]: _, ...rest }) => rest);
    try {
      await work();
    } catch (error) {
      setProblems((known) => ({ ...known, [destination.id]: refusal(error) }));
    } finally {
      setBusy(null);
    }
  };
  const test = (destination: Destination) => act(destination, async () => {
    const answer = await send<{ data: TestResult }>("POST", alertsPath(props.me, `/destinations/${destination.id}/test`));
    setTests((known) => ({ ...known, [destination.id]: answer.data }));
  });
  const remove = (destination: Destination) => act(destination, async () => {
    await send("DELETE", alertsPath(props.me, `/destinations/${destination.id}`));
    props.onChange();
  });

  return (
    <div className="scroll">
      <table className="destinations">
        <thead><tr><th>name</th><th>kind</th><th>url</th><th>signed</th><th></th></tr></thead>
        <tbody>
          {props.destinations.map((destination) => {
            const using = props.rules.filter((rule) => rule.destination_id === destination.id);
            const result = tests[destination.id];
            const question = using.length
              ? `Delete “${destination.name}”? This also deletes the ${using.length === 1 ? "rule" : `${using.length} rules`} that send${using.length === 1 ? "s" : ""} to it: ${using.map((rule) => rule.name).join(", ")}.`
              : `Delete “${destination.name}”? No rule sends to it.`;
            return (
              <tr key={destination.id}>
                <td><strong>{destination.name}</strong></td>
                <td>{destination.kind}</td>
                <td className="mono url" title={destination.url}>{destination.url}</td>
                <td>{destination.has_secret ? <span title="each request carries X-Keelwave-Signature">yes</span> : <span className="muted">no</span>}</td>
                <td className="actions">
                  <button className="ghost" disabled={busy === destination.id} aria-label={`Send a test to ${destination.name}`} onClick={() => test(destination)}>
                    {busy === destination.id ? "Sending…" : "Send test"}
                  </button>{" "}
                  <Confirm label={`Delete destination ${destination.name}`} question={question} confirm="Yes, delete"
                    busy={busy === destination.id} onConfirm={() => remove(destination)} />
                  {result && (
                    <p className={result.delivered ? "test-result good" : "test-result bad"} role="status">
                      {result.delivered ? "delivered" : "not delivered"}
                      {result.status !== null ? ` · HTTP ${result.status}` : ""}
                      {result.duration_ms !== null ? ` · ${fmt.duration(result.duration_ms)}` : ""}
                      {result.error ? ` · ${result.error}` : ""}
                    </p>
                  )}
                  <Refused refusal={problems[destination.id] ?? null} />
                </td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}

function DestinationForm(props: { me: Me; onMade: () => void }) {
  const [name, setName] = useState("");
  const [kind, setKind] = useState<"webhook" | "slack">("webhook");
  const [url, setUrl] = useState("");
  const [secret, setSecret] = useState("");
  const [refused, setRefused] = useState<Refusal | null>(null);
  const [made, setMade] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  async function submit(event: React.FormEvent) {
    event.preventDefault();
    setBusy(true);
    setRefused(null);
    setMade(null);
    try {
      const answer = await send<{ data: Destination }>("POST", alertsPath(props.me, "/destinations"), {
        name: name.trim(), kind, url: url.trim(), secret: secret ? secret : null,
      });
      setMade(`Destination “${answer.data.name}” added${answer.data.has_secret ? ", signed" : ""}.`);
      setName(""); setUrl(""); setSecret("");
      props.onMade();
    } catch (error) {
      setRefused(refusal(error));
    } finally {
      setBusy(false);
    }
  }

  return (
    <form className="card alert-form" aria-label="New destination" onSubmit={submit}>
      <h3>New destination</h3>
      <div className="fields">
        <label>Name<input value={name} onChange={(e) => setName(e.target.value)} placeholder="on-call" {...invalid(refused, "name")} /></label>
        <label>Kind
          <select value={kind} onChange={(e) => setKind(e.target.value as "webhook" | "slack")} {...invalid(refused, "kind")}>
            <option value="webhook">webhook (JSON)</option>
            <option value="slack">slack (incoming webhook)</option>
          </select>
        </label>
        <label className="wide">URL
          <input value={url} onChange={(e) => setUrl(e.target.value)} {...invalid(refused, "url")}
            placeholder={kind === "slack" ? "https://hooks.slack.com/services/…" : "https://hooks.example.com/keelwave"} />
        </label>
        <label>Secret (optional)
          <input type="password" autoComplete="off" value={secret} onChange={(e) => setSecret(e.target.value)} placeholder="signs each request" {...invalid(refused, "secret")} />
        </label>
      </div>
      <div className="submit">
        <button type="submit" disabled={busy}>{busy ? "Adding…" : "Add destination"}</button>
        <Refused refusal={refused} />
        {made && <p className="good" role="status">{made}</p>}
      </div>
    </form>
  );
}
