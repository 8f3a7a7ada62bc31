export { Keelwave, getCurrentRun, type KeelwaveOptions, type AgentOptions } from "./client.js";
export { Run, AgentStopped, MaxStepsExceeded, LoopDetected, type RunOptions } from "./run.js";
export { canonicalJson, fingerprint } from "./canonical.js";
export * from "./protocol.js";
