import { useCallback, useEffect, useRef, useState } from "react";
import { get } from "./api";

// Fetch on mount and whenever `key` changes; again every `refreshMs` if given, and
// whenever `reload()` is called (after a change the page made itself).
export function useApi<T>(path: string | null, params: Record<string, any>, refreshMs?: number) {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [loading, setLoading] = useState(true);
  const [round, setRound] = useState(0);
  const key = path + JSON.stringify(params);
  const current = useRef(key);
  current.current = key;

  useEffect(() => {
    if (!path) return;
    let cancelled = false;
    setLoading(true);
    const load = () =>
      get<T>(path, params)
        .then((answer) => { if (!cancelled && current.current === key) { setData(answer); setError(null); } })
        .catch((problem: Error) => { if (!cancelled) setError(problem.message); })
        .finally(() => { if (!cancelled) setLoading(false); });
    load();
    const timer = refreshMs ? setInterval(load, refreshMs) : undefined;
    return () => { cancelled = true; if (timer) clearInterval(timer); };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [key, refreshMs, round]);

  const reload = useCallback(() => setRound((n) => n + 1), []);
  return { data, error, loading, reload };
}
