import { useState } from "react";
import { ApiError, Me, get, storeKey } from "../api";

export function SignIn(props: { problem: string | null; onSignedIn: (me: Me) => void }) {
  const [key, setKey] = useState("");
  const [error, setError] = useState<string | null>(props.problem);
  const [busy, setBusy] = useState(false);

  async function submit(event: React.FormEvent) {
    event.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const answer = await get<{ data: Me }>("/v1/me", {}, key.trim());
      if (answer.data.scope === "ingest") {
        setError("This key can only send data (scope 'ingest'). Use a 'read' or 'all' key.");
        return;
      }
      storeKey(key.trim());
      props.onSignedIn(answer.data);
    } catch (problem) {
      setError(problem instanceof ApiError && problem.status === 401
        ? `That key was refused: ${problem.message}.`
        : (problem as Error).message);
    } finally {
      setBusy(false);
    }
  }

  return (
    <div className="signin">
      <form onSubmit={submit} className="card">
        <h1>keelwave</h1>
        <p className="muted">See why your agents loop, stall or burn tokens.</p>
        <label htmlFor="key">API key</label>
        <input id="key" type="password" autoComplete="off" placeholder="kw_…" value={key}
          onChange={(event) => setKey(event.target.value)} autoFocus />
        {error && <p className="error" role="alert">{error}</p>}
        <button type="submit" disabled={busy || !key.trim()}>{busy ? "Checking…" : "Sign in"}</button>
        <p className="muted small">
          A key with scope <code>read</code> or <code>all</code>: <code>keelwave keys create --scope read</code>.
          It is kept in this browser only.
        </p>
      </form>
    </div>
  );
}
