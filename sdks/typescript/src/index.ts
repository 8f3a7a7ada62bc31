export { Keelwave, getCurrentRun, type KeelwaveOptions, type AgentOptions } from "./client.js";
export { Run, AgentStopped, MaxStepsExceeded, LoopDetected, TERMINATION_REASONS, type TerminationReason, type RunOptions } from "./run.js";
export { canonicalJson, fingerprint } from "./canonical.js";
