// The background sender: the agent hands over events and goes on. Events wait
// in a bounded queue; a timer sends them in batches with global fetch. Retries
// (connection errors, 429, 5xx) back off and honour Retry-After; every event
// has a stable identity, so a resend is stored once. Nothing here throws into
// the agent; problems are logged once.

export type Event = { kind: "run" | "step" | "ai" | "finish"; body: string };

const PATHS = {
  run: "/v1/ingest/agent/runs",
  step: "/v1/ingest/agent/steps",
  ai: "/v1/ingest/ai",
  finish: "/v1/ingest/agent/runs/finish", // the batch form: many finishes in one request
};
const MAX_BATCH = 500;

export class Transport {
  private queue: Event[] = [];
  private sending: Promise<void> | null = null;
  private timer: NodeJS.Timeout | null = null;
  private reported = new Set<string>();
  private downSince: number | null = null;
  dropped = 0;

  constructor(private endpoint: string, private apiKey: string, private maxQueue = 100_000, private log: (message: string) => void = (m) => console.warn(m)) {}

  send(event: Event): void {
    if (this.queue.length >= this.maxQueue) {
      this.dropped++;
      return;
    }
    this.queue.push(event);
    this.schedule(0);
  }

  /** Resolves once everything queued so far is sent, or false after `timeoutMs`. */
  async flush(timeoutMs = 10_000): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (this.queue.length || this.sending) {
      if (Date.now() > deadline) return false;
      // Wait on the send in progress, or let the scheduled timer fire (a resolved
      // promise here would spin on microtasks and starve the timer).
      await (this.sending ?? sleep(20));
    }
    return true;
  }

  private schedule(delayMs: number): void {
    if (this.timer || this.sending) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.sending = this.drain().finally(() => {
        this.sending = null;
        if (this.queue.length) this.schedule(this.backoffMs);
        this.backoffMs = 0;
      });
    }, delayMs);
    this.timer.unref?.();  // never keep the process alive just to send
  }

  private async drain(): Promise<void> {
    while (this.queue.length) {
      const taken = this.queue.splice(0, MAX_BATCH * 4);
      // Run starts first, finishes last: a finish never overtakes its run's start.
      const requests: Event[][] = [];
      for (const kind of ["run", "step", "ai", "finish"] as const) {
        const events = taken.filter((event) => event.kind === kind);
        for (let i = 0; i < events.length; i += MAX_BATCH) requests.push(events.slice(i, i + MAX_BATCH));
      }
      for (const batch of requests) {
        const delivered = await this.deliver(batch);
        if (!delivered) {
          // The server is away: put the rest back in front and try again later.
          const rest = requests.slice(requests.indexOf(batch)).flat();
          this.queue.unshift(...rest);
          return;
        }
      }
    }
  }

  private retryDelay = 500;
  private backoffMs = 0;  // how long to wait before the next attempt, after a failure

  private async deliver(batch: Event[]): Promise<boolean> {
    const first = batch[0];
    // Every kind goes in batches (the server takes arrays on each ingest endpoint).
    const path = PATHS[first.kind];
    const body = "[" + batch.map((event) => event.body).join(",") + "]";
    let status = 0, retryAfter: number | null = null;
    try {
      const response = await fetch(this.endpoint + path, {
        method: "POST",
        headers: { Authorization: `Bearer ${this.apiKey}`, "Content-Type": "application/json", "User-Agent": "keelwave-typescript" },
        body,
        signal: AbortSignal.timeout(10_000),
      });
      status = response.status;
      const header = response.headers.get("retry-after");
      retryAfter = header && !Number.isNaN(Number(header)) ? Number(header) * 1000 : null;
      await response.arrayBuffer().catch(() => undefined);
    } catch {
      status = 0;
    }
    if (status >= 200 && status < 300) {
      if (this.downSince !== null) {
        this.log(`keelwave: server reachable again after ${Math.round((Date.now() - this.downSince) / 1000)} s; sending resumes`);
        this.downSince = null;
      }
      this.retryDelay = 500;
      return true;
    }
    if (status && status !== 429 && status < 500) {
      this.report(`http-${status}`, `keelwave: the server refused ${batch.length} ${first.kind} event(s) with HTTP ${status}; dropping them`);
      return true;  // nothing to retry: the events themselves are wrong
    }
    if (this.downSince === null) {
      this.downSince = Date.now();
      this.report("down", `keelwave: cannot reach the server (${status ? `HTTP ${status}` : "no connection"}); the agent keeps running, events are kept and retried`);
    }
    const wait = retryAfter ?? this.retryDelay * (0.8 + Math.random() * 0.4);
    this.retryDelay = Math.min(this.retryDelay * 2, 30_000);
    this.backoffMs = Math.min(wait, 30_000);
    return false;
  }

  private report(kind: string, message: string): void {
    if (!this.reported.has(kind)) {
      this.reported.add(kind);
      this.log(message);
    }
  }
}

// A referenced timer: while someone awaits flush(), the process must stay up.
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
