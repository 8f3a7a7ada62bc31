// The keelwave API, from the browser. The key lives in localStorage and goes
// only in the Authorization header: never in a URL.

const KEY = "keelwave.apiKey";

export class ApiError extends Error {
  constructor(message: string, public status: number) {
    super(message);
  }
}

export function storedKey(): string | null {
  return localStorage.getItem(KEY);
}

export function storeKey(key: string | null): void {
  if (key) localStorage.setItem(KEY, key);
  else localStorage.removeItem(KEY);
}

export type Me = { project_id: string; project: string; scope: string };

export async function get<T = any>(path: string, params: Record<string, string | number | boolean | undefined | null> = {}, key = storedKey()): Promise<T> {
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "" && value !== false) query.set(name, String(value));
  }
  const url = path + (query.toString() ? `?${query}` : "");
  let response: Response;
  try {
    response = await fetch(url, { headers: { Authorization: `Bearer ${key ?? ""}` } });
  } catch {
    throw new ApiError("Cannot reach the keelwave server.", 0);
  }
  let body: any = null;
  try {
    body = await response.json();
  } catch {
    throw new ApiError(`The server answered ${response.status} without JSON.`, response.status);
  }
  if (!response.ok) throw new ApiError(body?.error?.message ?? `HTTP ${response.status}`, response.status);
  return body as T;
}

export function agentPath(me: Me, path: string): string {
  return `/v1/projects/${me.project_id}/agent${path}`;
}
