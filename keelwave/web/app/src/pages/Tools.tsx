import { useState } from "react";
import { Me, agentPath } from "../api";
import { useApi } from "../useApi";
import * as fmt from "../format";
import { Loading, Problem } from "../components/bits";
import { Link } from "../router";

export function Tools(props: { me: Me }) {
  const [window, setWindow] = useState("24h");
  const tools = useApi<any>(agentPath(props.me, "/tools"), { window });
  return (
    <section>
      <div className="heading">
        <h1>Tools</h1>
        <div className="segmented" role="group" aria-label="Time window">
          {["1h", "24h", "7d", "30d"].map((w) => (
            <button key={w} className={w === window ? "on" : ""} aria-pressed={w === window} onClick={() => setWindow(w)}>{w}</button>
          ))}
        </div>
      </div>
      <p className="muted">A repeat is a call whose tool and input already occurred earlier in the same run. A tool opens the runs that called it.</p>
      {tools.error ? <Problem message={tools.error} /> : !tools.data ? <Loading /> : !tools.data.data.length ?
        <p className="muted">No tool calls in this window.</p> : (
        <div className="scroll">
          <table>
            <thead><tr><th>tool</th><th className="num">calls</th><th className="num">runs</th><th className="num">repeat rate</th><th className="num">error rate</th><th className="num">p50</th><th className="num">p95</th></tr></thead>
            <tbody>
              {tools.data.data.map((row: any) => (
                <tr key={row.tool_name}>
                  <td><Link to={`/runs?tool=${encodeURIComponent(row.tool_name)}`} title={`runs that called ${row.tool_name}`}>{row.tool_name}</Link></td>
                  <td className="num">{row.calls}</td>
                  <td className="num">{row.runs}</td>
                  <td className={row.repeat_rate > 0 ? "num bad" : "num"}>{fmt.rate(row.repeat_rate)}</td>
                  <td className={row.error_rate > 0 ? "num bad" : "num"}>{fmt.rate(row.error_rate)}</td>
                  <td className="num">{fmt.duration(row.p50_duration_ms)}</td>
                  <td className="num">{fmt.duration(row.p95_duration_ms)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}
