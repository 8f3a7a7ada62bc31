// The keelwave API, from the browser. The key lives in localStorage and goes
// only in the Authorization header: never in a URL.

const KEY = "keelwave.apiKey";

// What the server refused, as it said it: the message, the HTTP status, and (for a 422)
// the field it is about and the error's code.
export class ApiError extends Error {
  constructor(message: string, public status: number, public field: string | null = null, public code: string | null = null) {
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

async function call<T>(method: string, url: string, key: string | null, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { Authorization: `Bearer ${key ?? ""}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response: Response;
  try {
    response = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch {
    throw new ApiError("Cannot reach the keelwave server.", 0);
  }
  let answer: any = null;
  try {
    answer = await response.json();
  } catch {
    throw new ApiError(`The server answered ${response.status} without JSON.`, response.status);
  }
  if (!response.ok) {
    const error = answer?.error;
    throw new ApiError(error?.message ?? `HTTP ${response.status}`, response.status, error?.field ?? null, error?.code ?? null);
  }
  return answer as T;
}

type ParamValue = string | number | boolean | undefined | null;

// A list value repeats the parameter (tag=a&tag=b); empty values are left out.
export async function get<T = any>(path: string, params: Record<string, ParamValue | ParamValue[]> = {}, key = storedKey()): Promise<T> {
  const query = new URLSearchParams();
  for (const [name, given] of Object.entries(params)) {
    for (const value of Array.isArray(given) ? given : [given]) {
      if (value !== undefined && value !== null && value !== "" && value !== false) query.append(name, String(value));
    }
  }
  return call<T>("GET", path + (query.toString() ? `?${query}` : ""), key);
}

// POST, PATCH or DELETE, with a JSON body if given.
export function send<T = any>(method: "POST" | "PATCH" | "DELETE", path: string, body?: unknown): Promise<T> {
  return call<T>(method, path, storedKey(), body);
}

export function agentPath(me: Me, path: string): string {
  return `/v1/projects/${me.project_id}/agent${path}`;
}

export function alertsPath(me: Me, path: string): string {
  return `/v1/projects/${me.project_id}/alerts${path}`;
}
