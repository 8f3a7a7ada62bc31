// The SDK's entry point: new Keelwave(), agent(), observe(), run(), getCurrentRun().
import { AsyncLocalStorage } from "node:async_hooks";
import { canonicalJson, fingerprint } from "./canonical.js";
import { DEFAULT_STEP_TYPE } from "./protocol.js";
import { AgentStopped, Run, type RunOptions } from "./run.js";
import { Transport, type Event } from "./transport.js";

const current = new AsyncLocalStorage<Run>();

/** The run the calling code is inside of (per async context), or undefined. */
export function getCurrentRun(): Run | undefined {
  return current.getStore();
}

export type KeelwaveOptions = { apiKey?: string; endpoint?: string; maxQueue?: number; log?: (message: string) => void };
export type AgentOptions = Omit<RunOptions, "input" | "runId">;

export class Keelwave {
  readonly endpoint: string;
  private transport: Transport | null = null;

  constructor(options: KeelwaveOptions = {}) {
    const apiKey = options.apiKey ?? process.env.KEELWAVE_API_KEY;
    this.endpoint = (options.endpoint ?? process.env.KEELWAVE_ENDPOINT ?? "http://localhost:8080").replace(/\/+$/, "");
    const log = options.log ?? ((message: string) => console.warn(message));
    if (!apiKey) {
      log("keelwave: no API key (set KEELWAVE_API_KEY); nothing will be recorded");
      return;
    }
    this.transport = new Transport(this.endpoint, apiKey, options.maxQueue, log);
    // Send what is left when the event loop empties, like Python's flush at exit.
    process.once("beforeExit", () => void this.transport?.flush(5_000));
  }

  get enabled(): boolean {
    return this.transport !== null;
  }

  /** @internal */
  send = (event: Event): void => {
    this.transport?.send(event);
  };

  /** Resolves once everything recorded so far is sent; false if `timeoutMs` passed first. */
  flush(timeoutMs = 10_000): Promise<boolean> {
    return this.transport ? this.transport.flush(timeoutMs) : Promise.resolve(true);
  }

  async shutdown(timeoutMs = 10_000): Promise<void> {
    await this.flush(timeoutMs);
    if (this.transport?.dropped) console.warn(`keelwave: ${this.transport.dropped} events were dropped (the queue was full)`);
  }

  /**
   * Run `body` as a run: it finishes "clean" when `body` resolves, "error" when
   * it throws (re-thrown unchanged), or with a guard's reason. Nested runs are children.
   */
  async run<T>(name: string, body: (run: Run) => T | Promise<T>, options: RunOptions = {}): Promise<T> {
    const run = new Run(this.send, name, getCurrentRun() ?? null, options);
    try {
      const result = await current.run(run, () => body(run));
      run.finish("clean", { output: result });
      return result;
    } catch (error) {
      run.finish(error instanceof AgentStopped ? error.terminationReason : "error", { error });
      throw error;
    }
  }

  /** Wrap an agent function (sync or async): each call is a run. Arguments are the run's input. */
  agent<A extends unknown[], R>(name: string, fn: (...args: A) => R | Promise<R>, options: AgentOptions = {}): (...args: A) => Promise<R> {
    return (...args: A) => this.run<R>(name, () => fn(...args), { ...options, input: argumentsAsInput(args) });
  }

  /**
   * Wrap a tool (sync or async): each call inside a run is a step, fingerprinted
   * for loop detection when stepType is "tool_call". The input is the single
   * argument, or the array of arguments when there are several.
   */
  observe<A extends unknown[], R>(name: string, fn: (...args: A) => R, options: { stepType?: string } = {}): (...args: A) => R {
    const stepType = options.stepType ?? DEFAULT_STEP_TYPE;
    const client = this;
    return function observed(this: unknown, ...args: A): R {
      const run = getCurrentRun();
      if (!run || !client.enabled) return fn.apply(this, args);
      const index = run.nextStepIndex();  // may throw MaxStepsExceeded: the tool never runs
      const inputJson = canonicalJson(argumentsAsInput(args));
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
