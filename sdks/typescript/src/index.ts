export { Keelwave, getCurrentRun, type KeelwaveOptions, type AgentOptions } from "./client.js";
export { Run, AgentStopped, MaxStepsExceeded, LoopDetected, type RunOptions } from "./run.js";
export { canonicalJson, fingerprint } from "./canonical.js";
export { boundTraceback } from "./traceback.js";
export { Redaction, REDACTED, type RedactionOptions } from "./redact.js";
export * from "./protocol.js";
