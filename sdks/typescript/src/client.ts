// The SDK's entry point: new Keelwave(), agent(), observe(), run(), getCurrentRun().
// What is wrong in the code itself (a step type outside the protocol, a bad name
// or tags given to observe() or agent()) throws a RangeError here, when the
// function is wrapped; what arrives at run time is checked by the run.
import { AsyncLocalStorage } from "node:async_hooks";
import { fingerprint } from "./canonical.js";
import { DEFAULT_STEP_TYPE, STEP_TYPES, TERMINATION_REASONS, type StepType } from "./protocol.js";
import { redactionFrom, type Redaction, type RedactionOptions } from "./redact.js";
import { AgentStopped, Run, type RunOptions } from "./run.js";
import { Spool, DEFAULT_SPOOL_MAX_BYTES } from "./spool.js";
import { EXIT_TIMEOUT_MS, Transport, type Event } from "./transport.js";
import { Problems, checkName, checkTags, vocabulary } from "./validate.js";

const current = new AsyncLocalStorage<Run>();

/** The run the calling code is inside of (per async context), or undefined. */
export function getCurrentRun(): Run | undefined {
  return current.getStore();
}

export type KeelwaveOptions = {
  apiKey?: string;
  endpoint?: string;
  maxQueue?: number;
  log?: (message: string) => void;
  /** Keep what could not be sent before exit here, for the next client with the same directory (default KEELWAVE_SPOOL_DIR). */
  spoolDir?: string;
  /** The most the spool directory holds; beyond it the oldest files are deleted. */
  spoolMaxBytes?: number;
  /**
   * Hide secrets before anything leaves the process: true (the default) the built-in
   * rules, options or a Redaction for more rules or a callback, false none.
   */
  redact?: boolean | RedactionOptions | Redaction;
};
export type AgentOptions = Omit<RunOptions, "input" | "runId">;

export class Keelwave {
  readonly endpoint: string;
  /** What is hidden before sending (null: nothing). A step's input is fingerprinted as sent: `fingerprint(name, client.redaction.canonicalJson(input))`. */
  readonly redaction: Redaction | null;
  private transport: Transport | null = null;
  private problems: Problems;

  constructor(options: KeelwaveOptions = {}) {
    const apiKey = options.apiKey ?? process.env.KEELWAVE_API_KEY;
    this.endpoint = (options.endpoint ?? process.env.KEELWAVE_ENDPOINT ?? "http://localhost:8080").replace(/\/+$/, "");
    const log = options.log ?? ((message: string) => console.warn(message));
    this.problems = new Problems(log); // each kind of problem is said once per client
    this.redaction = redactionFrom(options.redact, this.report); // a wrong option throws, key or not
    if (!apiKey) {
      log("keelwave: no API key (set KEELWAVE_API_KEY); nothing will be recorded");
      return;
    }
    const spoolDir = options.spoolDir ?? (process.env.KEELWAVE_SPOOL_DIR || undefined);
    const spool = spoolDir ? new Spool(spoolDir, this.endpoint, apiKey, options.spoolMaxBytes ?? DEFAULT_SPOOL_MAX_BYTES, log) : null;
    this.transport = new Transport(this.endpoint, apiKey, options.maxQueue, this.problems, spool);
    atExit.add(this.transport);
    installExitHooks();
  }

  get enabled(): boolean {
    return this.transport !== null;
  }

  /** @internal */
  send = (event: Event): void => {
    this.transport?.send(event);
  };

  /** @internal */
  report = (kind: string, message: string): void => this.problems.warn(kind, message);

  /**
   * Resolves once everything recorded so far is sent: true if the server stored
   * it all; false if `timeoutMs` passed first, or if anything since the previous
   * flush was lost (a refused key, an event the server refused, a full queue).
   */
  flush(timeoutMs = 10_000): Promise<boolean> {
    return this.transport ? this.transport.flush(timeoutMs) : Promise.resolve(true);
  }

  /** Send what is queued (up to `timeoutMs`) and stop; the rest goes to the spool directory, if any. */
  async shutdown(timeoutMs = 10_000): Promise<void> {
    if (!this.transport) return;
    atExit.delete(this.transport);
    await this.transport.close(timeoutMs);
  }

  /**
   * Run `body` as a run: it finishes "clean" when `body` resolves, "error" when
   * it throws (re-thrown unchanged), or with a guard's reason. Nested runs are children.
   */
  async run<T>(name: string, body: (run: Run) => T | Promise<T>, options: RunOptions = {}): Promise<T> {
    const run = new Run(this.send, name, getCurrentRun() ?? null, options, this.report, this.redaction);
    try {
      const result = await current.run(run, () => body(run));
      run.finish("clean", { output: result });
      return result;
    } catch (error) {
      const stopped = error instanceof AgentStopped && TERMINATION_REASONS.includes(error.terminationReason);
      run.finish(stopped ? error.terminationReason : "error", { error });
      throw error;
    }
  }

  /**
   * Wrap an agent function (sync or async): each call is a run. Arguments are the
   * run's input. A name or tags the server would refuse throw a RangeError here.
   */
  agent<A extends unknown[], R>(name: string, fn: (...args: A) => R | Promise<R>, options: AgentOptions = {}): (...args: A) => Promise<R> {
    checkName(name, "name");
    checkTags(options.tags);
    return (...args: A) => this.run<R>(name, () => fn(...args), { ...options, input: argumentsAsInput(args) });
  }

  /**
   * Wrap a tool (sync or async): each call inside a run is a step, fingerprinted
   * for loop detection when stepType is "tool_call". The input is the single
   * argument, or the array of arguments when there are several. A stepType
   * outside the protocol's, or a name the server would refuse, throw a
   * RangeError here, before the tool is ever called.
   */
  observe<A extends unknown[], R>(name: string, fn: (...args: A) => R, options: { stepType?: StepType } = {}): (...args: A) => R {
    checkName(name, "name");
    const stepType = vocabulary(options.stepType ?? DEFAULT_STEP_TYPE, STEP_TYPES, "stepType");
    const client = this;
    return function observed(this: unknown, ...args: A): R {
      const run = getCurrentRun();
      if (!run || !client.enabled) return fn.apply(this, args);
      const index = run.nextStepIndex();  // may throw MaxStepsExceeded: the tool never runs
      const inputJson = run.payload(argumentsAsInput(args)); // redacted: it is fingerprinted
      const startedAt = new Date().toISOString();
      const started = performance.now();
      const done = (output: unknown, error: unknown) => {
        const durationMs = performance.now() - started;
        run.sendStep(index, stepType, name, inputJson, error === undefined ? output : undefined, undefined, durationMs, error, startedAt);
        if (stepType === "tool_call" && error === undefined) run.check(fingerprint(name, inputJson).toString("base64"), index);
      };
      let result: R;
      try {
        result = fn.apply(this, args);
      } catch (error) {
        done(undefined, error);
        throw error;
      }
      if (result instanceof Promise) {
        return result.then(
          (value) => { done(value, undefined); return value; },
          (error) => { done(undefined, error); throw error; },
        ) as R;
      }
      done(result, undefined);
      return result;
    };
  }
}

function argumentsAsInput(args: unknown[]): unknown {
  return args.length === 1 ? args[0] : args;
}

// The transports to close when the process ends: one pair of listeners for all
// clients (a pair per client would trip Node's MaxListeners warning).
const atExit = new Set<Transport>();
let hooked = false;

function installExitHooks(): void {
  if (hooked) return;
  hooked = true;
  // The event loop is empty: send what is left (up to 5 s), as Python flushes at exit.
  process.on("beforeExit", () => {
    for (const transport of atExit) void transport.flushAtExit(EXIT_TIMEOUT_MS);
  });
  // process.exit() skips beforeExit: no time to send, but the spool can still be written.
  process.on("exit", () => {
    for (const transport of atExit) transport.closeNow();
  });
}
