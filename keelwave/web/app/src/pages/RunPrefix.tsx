// /runs/<prefix>: a run named by the start of its id, as the CLI takes it. One run
// starts so: its page (the address becomes its full id). Several: a list to pick from.
// None: says so.
import { useEffect } from "react";
import { Me, agentPath } from "../api";
import { useApi } from "../useApi";
import * as fmt from "../format";
import { Link, navigate } from "../router";
import { Loading, Problem, Status } from "../components/bits";

export const FULL_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function RunPrefix(props: { me: Me; prefix: string }) {
  const prefix = props.prefix.trim().toLowerCase();
  const valid = /^[0-9a-f-]+$/.test(prefix);
  // `q` matches id prefixes and also agent names: keep only the runs whose id starts so.
  const runs = useApi<any>(valid ? agentPath(props.me, "/runs") : null, { q: prefix, limit: 50 });
  const matches: any[] = (runs.data?.data ?? []).filter((run: any) => run.id.startsWith(prefix));
  useEffect(() => {
    if (matches.length === 1) navigate(`/runs/${matches[0].id}`, true);
  }, [matches.length === 1 ? matches[0].id : null]);

  if (!valid) return <NoRun prefix={props.prefix} why="is not the start of a run id (run ids are hexadecimal)" />;
  if (runs.error) return <Problem message={runs.error} />;
  if (!runs.data || matches.length === 1) return <Loading />;
  if (!matches.length) return <NoRun prefix={props.prefix} why="is the start of no run's id in this project" />;
  return (
    <section>
      <p><Link to="/runs">← Runs</Link></p>
      <h1>Runs starting with <span className="mono">{prefix}</span></h1>
      <p className="muted">{matches.length}{runs.data.next_cursor ? "+" : ""} runs start so; pick one, or give more of its id.</p>
      <div className="scroll">
        <table>
          <thead><tr><th>run</th><th>agent</th><th>started</th><th>status</th></tr></thead>
          <tbody>{matches.map((run) => (
            <tr key={run.id}>
              <td><Link to={`/runs/${run.id}`} className="mono">{run.id}</Link></td>
              <td>{run.agent_name}</td>
              <td>{fmt.whenShort(run.started_at)}</td>
              <td><Status run={run} /></td>
            </tr>))}</tbody>
        </table>
      </div>
    </section>
  );
}

function NoRun(props: { prefix: string; why: string }) {
  return (
    <section>
      <p><Link to="/runs">← Runs</Link></p>
      <h1>No such run</h1>
      <p role="alert" className="error"><span className="mono">{props.prefix}</span> {props.why}.</p>
    </section>
  );
}
