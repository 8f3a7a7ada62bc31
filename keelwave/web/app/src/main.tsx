import { StrictMode, useEffect, useState } from "react";
import { createRoot } from "react-dom/client";
import { ApiError, Me, get, storeKey, storedKey } from "./api";
import { Link, navigate, usePath } from "./router";
import { SignIn } from "./pages/SignIn";
import { Overview } from "./pages/Overview";
import { Runs } from "./pages/Runs";
import { RunDetail } from "./pages/RunDetail";
import { Tools } from "./pages/Tools";
import { Alerts } from "./pages/Alerts";
import { Compare } from "./pages/Compare";
import { Cost } from "./pages/Cost";
import { NotFound } from "./pages/NotFound";
import { FULL_ID, RunPrefix } from "./pages/RunPrefix";
import "./styles.css";

function App() {
  const path = usePath();
  const [me, setMe] = useState<Me | null>(null);
  const [checking, setChecking] = useState<boolean>(!!storedKey());
  const [problem, setProblem] = useState<string | null>(null);

  useEffect(() => {
    const key = storedKey();
    if (!key) return;
    get<{ data: Me }>("/v1/me", {}, key)
      .then((answer) => setMe(answer.data))
      .catch((error: ApiError) => {
        if (error.status === 401) storeKey(null);
        setProblem(error.message);
      })
      .finally(() => setChecking(false));
  }, []);

  if (checking) return <div className="center muted">Checking your key…</div>;
  if (!me) return <SignIn problem={problem} onSignedIn={(who) => { setMe(who); setProblem(null); }} />;

  const signOut = () => { storeKey(null); setMe(null); navigate("/"); };
  const pathname = path.split("?")[0];
  let page: React.ReactNode;
  const runId = pathname.startsWith("/runs/") ? decodeURIComponent(pathname.slice(6)).replace(/\/$/, "") : null;
  if (runId) page = FULL_ID.test(runId) ? <RunDetail key={runId} me={me} runId={runId.toLowerCase()} /> : <RunPrefix me={me} prefix={runId} />;
  else if (pathname === "/runs" || pathname === "/runs/") page = <Runs me={me} />;
  else if (pathname === "/tools") page = <Tools me={me} />;
  else if (pathname === "/cost") page = <Cost me={me} />;
  else if (pathname === "/compare") page = <Compare me={me} />;
  else if (pathname === "/alerts") page = <Alerts me={me} />;
  else if (pathname === "/") page = <Overview me={me} />;
  else page = <NotFound path={pathname} />;
  const tab = (to: string, label: string) => (
    <Link to={to} className={(to === "/" ? pathname === "/" : pathname.startsWith(to)) ? "tab active" : "tab"}>{label}</Link>
  );

  return (
    <div className="shell">
      <header className="top">
        <Link to="/" className="brand">keelwave</Link>
        <nav aria-label="Pages">{tab("/", "Overview")}{tab("/runs", "Runs")}{tab("/tools", "Tools")}{tab("/cost", "Cost")}{tab("/alerts", "Alerts")}</nav>
        <span className="spacer" />
        <span className="muted project">project {me.project}</span>
        <button className="ghost" onClick={signOut}>Sign out</button>
      </header>
      <main>{page}</main>
    </div>
  );
}

createRoot(document.getElementById("root")!).render(<StrictMode><App /></StrictMode>);
