// Rows of the runs table: a run, and under a parent its child runs (loaded when the
// parent is opened), marked ↳ and indented.
import { useState } from "react";
import { Me, agentPath } from "../api";
import { useApi } from "../useApi";
import * as fmt from "../format";
import { Link } from "../router";
import { LoopBadge, Status, WarningBadges } from "./bits";
import { Bell } from "./alerts";
import { loops, source } from "../verdict";

export const COLUMNS = 11;

type RowProps = {
  me: Me; run: any; fired: Map<string, string[]>; picked: string[]; onPick: (id: string) => void;
  depth?: number; grouped: boolean;
};

export function RunRow(props: RowProps) {
  const [open, setOpen] = useState(false);
  const { run } = props;
  const depth = props.depth ?? 0;
  const children = run.child_count ?? 0;
  const short = fmt.shortId(run.id);
  const classes = [loops(run) ? `looping ${source(run)}` : "", depth ? "child-run" : ""].join(" ").trim();
  return (
    <>
      <tr className={classes || undefined}>
        <td className="pick">
          <input type="checkbox" aria-label={`compare ${short}`} checked={props.picked.includes(run.id)} onChange={() => props.onPick(run.id)} />
        </td>
        <td className={depth ? "indent" : undefined}>
          {depth > 0 && <span className="child-mark" title="a child run">↳ </span>}
          <Link to={`/runs/${run.id}`} className="mono">{short}</Link>
          {!props.grouped && run.parent_run_id && depth === 0 && (
            <span className="muted small child-of"> ↳ child of <Link to={`/runs/${run.parent_run_id}`} className="mono">{fmt.shortId(run.parent_run_id)}</Link></span>)}
          {props.grouped && children > 0 && (
            <button className="ghost small expander" aria-expanded={open} onClick={() => setOpen(!open)}
              title={open ? "hide its child runs" : "show its child runs"}>
              {open ? "▾" : "▸"} {children} {children === 1 ? "child" : "children"}
            </button>)}
        </td>
        <td>{run.agent_name}</td>
        <td title={fmt.when(run.started_at)}><span className="abs">{fmt.whenShort(run.started_at)}</span> <span className="muted small">{fmt.ago(run.started_at)}</span></td>
        <td className="num">{run.ended_at || run.duration_ms !== null ? fmt.duration(run.duration_ms) : <span className="muted">running</span>}</td>
        <td className="num">{run.step_count}</td>
        <td><Status run={run} /></td>
        <td><div className="verdicts"><LoopBadge run={run} /><WarningBadges run={run} />{props.fired.has(run.id) && <Bell title={`fired an alert: ${props.fired.get(run.id)!.join(", ")}`} />}</div></td>
        <td className="num">{fmt.tokens(run.input_tokens + run.output_tokens)}</td>
        <td className="num">{fmt.money(run.cost_usd)}</td>
        <td className="wrap small">{(run.tags ?? []).map((tag: string) => <span key={tag} className="chip">{tag}</span>)}</td>
      </tr>
      {open && <ChildRows {...props} depth={depth + 1} />}
    </>
  );
}

function ChildRows(props: RowProps) {
  const children = useApi<any>(agentPath(props.me, "/runs"), { parent_run_id: props.run.id, sort: "started_at", order: "asc", limit: 200 });
  if (children.error) return <tr><td colSpan={COLUMNS} className="error indent">{children.error}</td></tr>;
  if (!children.data) return <tr><td colSpan={COLUMNS} className="muted indent">Loading its child runs…</td></tr>;
  // A server that ignores parent_run_id answers with every run: keep only the children.
  const rows = children.data.data.filter((child: any) => child.parent_run_id === props.run.id);
  return <>{rows.map((child: any) => <RunRow key={child.id} {...props} run={child} depth={props.depth} />)}</>;
}
