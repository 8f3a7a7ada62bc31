// The spool directory: events a process could not send before it ended, kept on
// disk for the next client started with the same directory (opt-in: spoolDir or
// KEELWAVE_SPOOL_DIR). The same format and protocol as the Python SDK's
// _spool.py, so either SDK resends the other's files:
//
// - one file per process, JSON lines {"kind": "step", "body": "<the event's JSON
//   text>"} (the body kept as text: the server fingerprints tool_input over the
//   exact bytes it receives), named keelwave-<ident>-<time>-<pid>-<random>.jsonl,
//   where <ident> hashes the endpoint and the API key (never the key itself);
// - written under a hidden temporary name, synced, then renamed into place;
// - claimed by renaming it to <name>.claimed-<token> before reading it, so of two
//   processes racing for a file, one wins; deleted once every event in it is
//   settled; a process that exits first writes what is left to a new file, then
//   deletes its claims; a crashed one's claims are taken over once older than
//   STALE_CLAIM_MS (a live process refreshes its claims every minute);
// - bounded: before a file is written the oldest files are deleted until all fit.

import { createHash, randomBytes } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import type { Event, Kind } from "./transport.js";

export const DEFAULT_SPOOL_MAX_BYTES = 32 * 1024 * 1024;
export const STALE_CLAIM_MS = 600_000;
const REFRESH_MS = 60_000;
const CLAIMED = ".claimed-";
const KINDS = new Set(["run", "step", "ai", "finish"]);

/** A file this process claimed; deleted once each of its events is settled. */
export class Claim {
  private left: number;
  constructor(private spool: Spool, readonly file: string, readonly events: Event[]) {
    this.left = events.length;
    for (const event of events) event.claim = this;
  }

  settled(count = 1): void {
    this.left -= count;
    if (this.left === 0) this.spool.release(this);
  }
}

export class Spool {
  private held = new Set<Claim>();
  private ident: string;
  private refreshed = Date.now();

  constructor(readonly directory: string, endpoint: string, apiKey: string, readonly maxBytes: number, private log: (message: string) => void) {
    this.ident = createHash("sha256").update(`${endpoint}\n${apiKey}`).digest("hex").slice(0, 16);
  }

  /** Claim this client's files one at a time (oldest first) and read them. */
  *claims(): Generator<Claim> {
    let names: string[];
    try {
      names = fs.readdirSync(this.directory).filter((name) => name.startsWith(`keelwave-${this.ident}-`)).sort();
    } catch {
      return;
    }
    for (const name of fs.readdirSync(this.directory)) {
      const file = path.join(this.directory, name); // a write cut short by a crash
      if (name.startsWith(`.keelwave-${this.ident}-`) && name.endsWith(".tmp") && Date.now() - mtime(file) > STALE_CLAIM_MS) this.unlink(file);
    }
    for (const name of names) {
      const file = path.join(this.directory, name);
      let base: string;
      if (name.includes(CLAIMED)) {
        base = name.slice(0, name.indexOf(CLAIMED)); // someone else's, unless they died long ago
        if (Date.now() - mtime(file) < STALE_CLAIM_MS) continue;
      } else if (name.endsWith(".jsonl")) {
        base = name;
      } else continue;
      const claimed = path.join(this.directory, `${base}${CLAIMED}${process.pid}-${randomBytes(4).toString("hex")}`);
      try {
        fs.renameSync(file, claimed); // atomic: of two claimants, one fails here
        const now = new Date();
        fs.utimesSync(claimed, now, now); // the claim's age starts now
      } catch {
        continue;
      }
      const events = this.read(claimed);
      if (events.length) yield new Claim(this, claimed, events); // the caller holds it, or gives it back
      else this.unlink(claimed);
    }
  }

  private read(file: string): Event[] {
    let text: string;
    try {
      text = fs.readFileSync(file, "utf8");
    } catch (error) {
      this.log(`keelwave: cannot read the spool file ${file}: ${error}`);
      return [];
    }
    const events: Event[] = [];
    let bad = 0;
    for (const line of text.split("\n")) {
      if (!line.trim()) continue;
      try {
        const item = JSON.parse(line);
        if (KINDS.has(item.kind) && typeof item.body === "string") events.push({ kind: item.kind as Kind, body: item.body });
        else bad++;
      } catch {
        bad++;
      }
    }
    if (bad) this.log(`keelwave: ${bad} lines of the spool file ${file} are not events; skipped`);
    return events;
  }

  hold(claim: Claim): void {
    this.held.add(claim);
  }

  /** Unclaim a file read but never resent (the client closed meanwhile). */
  giveBack(claim: Claim): void {
    const name = path.basename(claim.file);
    try {
      fs.renameSync(claim.file, path.join(this.directory, name.slice(0, name.indexOf(CLAIMED))));
    } catch {
      // taken over meanwhile: nothing to do
    }
  }

  get holding(): boolean {
    return this.held.size > 0;
  }

  /** Tell other processes the claims held here are alive (at most once a minute). */
  refresh(): void {
    if (Date.now() - this.refreshed < REFRESH_MS) return;
    this.refreshed = Date.now();
    const now = new Date();
    for (const claim of this.held) {
      try {
        fs.utimesSync(claim.file, now, now);
      } catch {
        // taken over or deleted to make room: it is released in the end anyway
      }
    }
  }

  /** Delete a claimed file: its events are settled, or written to a new file. */
  release(claim: Claim): void {
    this.held.delete(claim);
    this.unlink(claim.file);
  }

  releaseAll(): void {
    for (const claim of [...this.held]) this.release(claim);
  }

  /** Write `events` (oldest first) to a new file of their own, synchronously (it runs at exit). */
  write(events: Event[]): string | null {
    const lines = events.map((event) => Buffer.from(JSON.stringify({ kind: event.kind, body: event.body }) + "\n"));
    let size = 0, first = lines.length;
    while (first > 0 && size + lines[first - 1].length <= this.maxBytes) size += lines[--first].length;
    if (first) this.log(`keelwave: ${lines.length} events do not fit in spoolMaxBytes=${this.maxBytes}; the oldest ${first} are left out`);
    if (first === lines.length) return null;
    const name = `keelwave-${this.ident}-${BigInt(Date.now()) * 1_000_000n + (process.hrtime.bigint() % 1_000_000n)}-${process.pid}-${randomBytes(4).toString("hex")}`;
    const file = path.join(this.directory, `${name}.jsonl`);
    const temporary = path.join(this.directory, `.${name}.tmp`);
    try {
      fs.mkdirSync(this.directory, { recursive: true, mode: 0o700 });
      this.makeRoom(size);
      const descriptor = fs.openSync(temporary, "wx", 0o600); // events hold the agent's inputs and outputs
      try {
        for (const line of lines.slice(first)) fs.writeSync(descriptor, line);
        fs.fsyncSync(descriptor);
      } finally {
        fs.closeSync(descriptor);
      }
      fs.renameSync(temporary, file);
    } catch (error) {
      this.log(`keelwave: cannot write the spool file ${file}: ${error}`);
      this.unlink(temporary);
      return null;
    }
    return file;
  }

  /** Delete the oldest spool files (anyone's) until `incoming` more bytes fit. */
  private makeRoom(incoming: number): void {
    const held = new Set([...this.held].map((claim) => claim.file));
    const files: { file: string; mtime: number; size: number }[] = [];
    for (const name of fs.readdirSync(this.directory)) {
      const file = path.join(this.directory, name);
      if (!name.startsWith("keelwave-") || held.has(file)) continue;
      try {
        const status = fs.statSync(file);
        files.push({ file, mtime: status.mtimeMs, size: status.size });
      } catch {
        // gone meanwhile
      }
    }
    let total = files.reduce((sum, entry) => sum + entry.size, incoming);
    if (total <= this.maxBytes) return;
    let deleted = 0, freed = 0;
    for (const entry of files.sort((a, b) => a.mtime - b.mtime)) {
      if (total <= this.maxBytes) break;
      if (!this.unlink(entry.file)) continue;
      total -= entry.size;
      deleted++;
      freed += entry.size;
    }
    this.log(`keelwave: the spool directory ${this.directory} is over spoolMaxBytes=${this.maxBytes}; deleted the oldest ${deleted} file(s), ${freed} bytes of events never sent`);
  }

  private unlink(file: string): boolean {
    try {
      fs.unlinkSync(file);
      return true;
    } catch {
      return false;
    }
  }
}

function mtime(file: string): number {
  try {
    return fs.statSync(file).mtimeMs;
  } catch {
    return Date.now();
  }
}
