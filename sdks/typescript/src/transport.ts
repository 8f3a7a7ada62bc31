// The background sender: the agent hands over events and goes on. Events wait
// in a bounded queue; a timer sends them in batches with global fetch. Nothing
// here throws into the agent; problems are logged once per kind.
//
// - Connection errors, 408, 429 and 5xx are retried with backoff, honouring
//   Retry-After; every event has a stable identity, so a resend is stored once.
// - The server refuses a request whole for one bad element (422 naming it,
//   "[3].step_type"; 400 for a body it cannot parse; 413 for one too large). A
//   refused batch is split and the parts resent (the named element alone and
//   the rest together, or the halves), so only the bad events are lost, each
//   kind of loss logged once with the server's own words. A refused key (401,
//   403) or a wrong endpoint refuses every part alike: dropped and said once.
// - flush() resolves to false after its timeout, and when anything since the
//   previous flush was lost (refused, or dropped because the queue was full).
// - At close, what could not be sent goes to the spool directory if there is
//   one (spool.ts); a new client with that directory resends it.

import type { Claim, Spool } from "./spool.js";
import type { Problems } from "./validate.js";

export type Kind = "run" | "step" | "ai" | "finish";
export type Event = { kind: Kind; body: string; claim?: Claim };

const PATHS: Record<Kind, string> = {
  run: "/v1/ingest/agent/runs",
  step: "/v1/ingest/agent/steps",
  ai: "/v1/ingest/ai",
  finish: "/v1/ingest/agent/runs/finish", // the batch form: many finishes in one request
};
const NOUNS: Record<Kind, string> = { run: "run start", step: "step", ai: "model call", finish: "run finish" };
const MAX_BATCH = 500;
const SPLIT = new Set([400, 413, 422]); // about the events themselves: some may be fine
const KEY_REFUSED = new Set([401, 403]);
const RETRY = new Set([408, 429]); // and every 5xx, and no answer at all
export const EXIT_TIMEOUT_MS = 5_000;

type Answer = { status: number; retryAfterMs: number | null; code: string; message: string; field: string; element: number | null };

export class Transport {
  private queue: Event[] = [];
  private taken = new Set<Event>(); // taken from the queue, not yet settled
  private unfed: Event[] = []; // read from the spool, not yet queued
  private feeding = false;
  private sending: Promise<void> | null = null;
  private timer: NodeJS.Timeout | null = null;
  private downSince: number | null = null;
  private retryDelay = 500;
  private backoffMs = 0; // how long to wait before the next attempt, after a failure
  private lost = 0; // events lost since the last flush
  private closed = false;
  private closing: Promise<void> | null = null;
  dropped = 0;

  constructor(private endpoint: string, private apiKey: string, private maxQueue = 100_000, private problems: Problems, private spool: Spool | null = null) {
    if (spool) {
      this.feeding = true;
      setImmediate(() => void this.resend()).unref();
    }
  }

  send(event: Event): void {
    if (this.closed || this.queue.length >= this.maxQueue) {
      this.dropped++;
      this.lost++;
      return;
    }
    this.queue.push(event);
    this.schedule(0);
  }

  /** Resolves once everything queued so far is settled: true if it was all stored. */
  async flush(timeoutMs = 10_000): Promise<boolean> {
    if (!(await this.wait(timeoutMs))) return false;
    const lost = this.lost;
    this.lost = 0;
    return lost === 0;
  }

  private async wait(timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    if (this.timer && this.queue.length) { // waiting out a backoff: try now instead
      clearTimeout(this.timer);
      this.timer = null;
      this.schedule(0);
    }
    while (this.queue.length || this.sending || this.taken.size || this.feeding) {
      const remaining = deadline - Date.now();
      if (remaining <= 0) return false;
      // Wait on the send in progress, or let the scheduled timer fire (a resolved
      // promise here would spin on microtasks and starve the timer).
      await within(this.sending ?? sleep(20), remaining);
    }
    return true;
  }

  /** Send what is queued (up to `timeoutMs`), then stop; spool or report the rest. */
  close(timeoutMs = EXIT_TIMEOUT_MS): Promise<void> {
    this.closing ??= this.wait(timeoutMs).then(() => this.closeNow());
    return this.closing;
  }

  /** When the event loop is empty: send what is left; stop if it cannot be sent in time. */
  async flushAtExit(timeoutMs: number): Promise<void> {
    if (!this.closed && !(await this.wait(timeoutMs))) this.closeNow();
  }

  /** Stop at once (process.exit() leaves no time): spool or report what is left. */
  closeNow(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    const left = [...this.unfed, ...this.taken, ...this.queue]; // oldest first
    this.unfed = [];
    this.taken.clear();
    this.queue = [];
    if (this.spool) {
      if (left.length) {
        const file = this.spool.write(left);
        if (file === null) return; // said why; the claims stay, for a later process to take over
        this.problems.say(`${left.length} events were not sent before exit; written to ${file}, for the next client that starts with this spool directory`);
      }
      this.spool.releaseAll(); // what they held is stored, or in the new file
    } else if (left.length) {
      this.problems.say(`${left.length} events were not sent before exit (the server did not answer; a spool directory would keep them for later)`);
    }
    if (this.dropped) this.problems.say(`${this.dropped} events were dropped (the queue was full)`);
  }

  private schedule(delayMs: number): void {
    if (this.timer || this.sending || this.closed) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.sending = this.drain().catch((error) => this.problems.warn("bug", `failed to send events: ${error}`)).finally(() => {
        this.sending = null;
        if (this.queue.length) this.schedule(this.backoffMs);
        this.backoffMs = 0;
      });
    }, delayMs);
    this.timer.unref?.(); // never keep the process alive just to send
  }

  private async drain(): Promise<void> {
    while (this.queue.length && !this.closed) {
      const taken = this.queue.splice(0, MAX_BATCH * 4);
      for (const event of taken) this.taken.add(event);
      // Run starts first, finishes last: a finish never overtakes its run's start.
      const requests: Event[][] = [];
      for (const kind of ["run", "step", "ai", "finish"] as const) {
        const events = taken.filter((event) => event.kind === kind);
        for (let i = 0; i < events.length; i += MAX_BATCH) requests.push(events.slice(i, i + MAX_BATCH));
      }
      let unsent: Event[] = [];
      for (const batch of requests) {
        if (unsent.length) unsent = unsent.concat(batch);
        else unsent = await this.deliver(batch);
      }
      if (unsent.length) {
        // The server is away: put the rest back in front and try again later.
        if (this.closed) return; // closeNow() has them already
        for (const event of unsent) this.taken.delete(event);
        this.queue = unsent.concat(this.queue);
        return;
      }
    }
  }

  /** Send one batch, splitting it when refused; the events left unsent (the server is away). */
  private async deliver(batch: Event[]): Promise<Event[]> {
    const kind = batch[0].kind;
    const parts = [batch];
    while (parts.length) {
      const part = parts.pop()!;
      const answer = await this.post(kind, part);
      const status = answer.status;
      if (!status || status >= 500 || RETRY.has(status)) {
        this.away(answer);
        return parts.flat().concat(part);
      }
      this.reachable();
      if (status < 300) this.settle(part, true);
      else if (SPLIT.has(status) && part.length > 1) parts.push(...split(part, answer.element));
      else {
        this.settle(part, false);
        this.refused(kind, part.length, answer);
      }
    }
    return [];
  }

  private async post(kind: Kind, part: Event[]): Promise<Answer> {
    const answer: Answer = { status: 0, retryAfterMs: null, code: "", message: "", field: "", element: null };
    try {
      const response = await fetch(this.endpoint + PATHS[kind], {
        method: "POST",
        headers: { Authorization: `Bearer ${this.apiKey}`, "Content-Type": "application/json", "User-Agent": "keelwave-typescript" },
        body: "[" + part.map((event) => event.body).join(",") + "]",
        signal: AbortSignal.timeout(10_000),
      });
      answer.status = response.status;
      const header = response.headers.get("retry-after");
      answer.retryAfterMs = header && !Number.isNaN(Number(header)) ? Number(header) * 1000 : null;
      const text = await response.text().catch(() => "");
      if (answer.status >= 400) readError(text, answer);
    } catch {
      answer.status = 0;
    }
    return answer;
  }

  private settle(events: Event[], stored: boolean): void {
    for (const event of events) {
      this.taken.delete(event);
      if (!this.closed) event.claim?.settled(); // once closed, the claims are settled by closeNow()
    }
    if (!stored) this.lost += events.length;
  }

  private away(answer: Answer): void {
    if (this.downSince === null) {
      this.downSince = Date.now();
      this.problems.warn("down", `cannot reach the server (${answer.status ? `HTTP ${answer.status}` : "no connection"}); the agent keeps running, events are kept and retried`);
    }
    const wait = answer.retryAfterMs ?? this.retryDelay * (0.8 + Math.random() * 0.4);
    this.retryDelay = Math.min(this.retryDelay * 2, 30_000);
    this.backoffMs = Math.min(wait, 30_000);
  }

  private reachable(): void {
    this.retryDelay = 500;
    if (this.downSince === null) return;
    this.problems.say(`server reachable again after ${Math.round((Date.now() - this.downSince) / 1000)} s; sending resumes`);
    this.downSince = null;
  }

  private refused(kind: Kind, count: number, answer: Answer): void {
    let said = `HTTP ${answer.status}${answer.code ? " " + answer.code : ""}`;
    if (answer.message) said += `: ${answer.message}`;
    if (KEY_REFUSED.has(answer.status)) {
      this.problems.warn("key", `the server refused the API key (${said}); nothing is recorded until the key is fixed (KEELWAVE_API_KEY)`);
    } else if (SPLIT.has(answer.status)) {
      this.problems.warn(`refused ${answer.status} ${answer.code} ${answer.field} ${kind}`,
        `the server refused a ${NOUNS[kind]} (${said}); it is dropped, and other ${NOUNS[kind]}s refused for this reason will be dropped without another word`);
    } else {
      this.problems.warn(`refused ${answer.status}`, `the server refused ${count} ${NOUNS[kind]}(s) (${said}); they are dropped. Is ${this.endpoint} a keelwave server?`);
    }
  }

  /** Queue the spooled events of this client's files, never filling the queue. */
  private async resend(): Promise<void> {
    const spool = this.spool!;
    try {
      for (const claim of spool.claims()) {
        if (this.closed) {
          spool.giveBack(claim);
          return;
        }
        spool.hold(claim);
        this.unfed = claim.events.slice();
        while (this.unfed.length && !this.closed) {
          const room = Math.max(1, Math.floor(this.maxQueue / 2)) - this.queue.length; // room left for the agent
          if (room > 0) {
            this.queue = this.queue.concat(this.unfed.splice(0, room));
            this.schedule(0);
          }
          spool.refresh();
          await sleep(room > 0 ? 0 : 100, false); // unreferenced: the agent may exit meanwhile
        }
      }
    } catch (error) {
      this.problems.warn("spool", `failed to resend the spool: ${error}`);
    } finally {
      this.feeding = false;
    }
    while (spool.holding && !this.closed) { // until the claims are settled
      await sleep(5_000, false);
      spool.refresh();
    }
  }
}

/** The parts to resend, the one to send first last (they are popped from the end). */
function split(part: Event[], element: number | null): Event[][] {
  if (element !== null && element >= 0 && element < part.length) {
    return [part.slice(0, element).concat(part.slice(element + 1)), [part[element]]];
  }
  const middle = Math.floor(part.length / 2);
  return [part.slice(middle), part.slice(0, middle)];
}

/** The server's {"error": {code, message, field}}, about one element of the batch. */
function readError(text: string, answer: Answer): void {
  try {
    const error = JSON.parse(text).error;
    answer.code = String(error.code ?? "");
    answer.message = String(error.message ?? "");
    answer.field = String(error.field ?? "");
  } catch {
    answer.message = text.slice(0, 200).trim();
    return;
  }
  const match = /^\[(\d+)\]\.?/.exec(answer.field);
  if (match) {
    answer.element = Number(match[1]);
    answer.field = answer.field.slice(match[0].length);
    if (answer.message.startsWith(match[0])) answer.message = answer.message.slice(match[0].length);
  }
}

// A referenced timer by default: while someone awaits flush(), the process must stay up.
function sleep(ms: number, referenced = true): Promise<void> {
  return new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    if (!referenced) timer.unref();
  });
}

/** Wait for `promise`, but no longer than `ms` (and leave no timer behind). */
function within(promise: Promise<unknown>, ms: number): Promise<void> {
  return new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    const done = () => {
      clearTimeout(timer);
      resolve();
    };
    promise.then(done, done);
  });
}
