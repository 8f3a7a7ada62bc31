// The TypeScript SDK against a real `keelwave serve` (started by tests/test_typescript_sdk.py,
// which passes KEELWAVE_TEST_ENDPOINT, KEELWAVE_TEST_INGEST_KEY and KEELWAVE_TEST_READ_KEY).
import { test } from "node:test";
import assert from "node:assert/strict";
import { Keelwave, getCurrentRun, canonicalJson, fingerprint, MaxStepsExceeded, LoopDetected, boundTraceback, TRACEBACK_SENT_MAX } from "../dist/index.js";

const endpoint = process.env.KEELWAVE_TEST_ENDPOINT;
const skip = endpoint ? false : "needs a server: run through pytest tests/test_typescript_sdk.py";
const client = new Keelwave({ apiKey: process.env.KEELWAVE_TEST_INGEST_KEY, endpoint });

async function api(path) {
  const me = await (await fetch(`${endpoint}/v1/me`, { headers: { Authorization: `Bearer ${process.env.KEELWAVE_TEST_READ_KEY}` } })).json();
  const response = await fetch(`${endpoint}/v1/projects/${me.data.project_id}/agent${path}`, {
    headers: { Authorization: `Bearer ${process.env.KEELWAVE_TEST_READ_KEY}` },
  });
  assert.equal(response.status, 200, await response.clone().text());
  return (await response.json()).data;
}

test("a looping agent: five identical calls, a loop from step 1", { skip }, async () => {
  const webSearch = client.observe("web_search", async (params) => ({ results: [`result for ${params.q}`] }));
  const agent = client.agent("looping-agent", async (question) => {
    for (let i = 0; i < 5; i++) await webSearch({ q: question, max_results: 3 });
    return getCurrentRun().id;
  });
  const runId = await agent("What is keelwave?");
  assert.ok(await client.flush());
  const run = await api(`/runs/${runId}`);
  assert.equal(run.loop_detected, true);
  assert.equal(run.loop_step_index, 1);
  assert.equal(run.termination_reason, "clean");
  const loops = await api(`/runs/${runId}/loops`);
  const expected = fingerprint("web_search", canonicalJson({ max_results: 3, q: "What is keelwave?" })).toString("base64");
  assert.deepEqual(loops, [{ fingerprint: expected, hits: 5, step_indices: [1, 2, 3, 4, 5], tool_name: "web_search" }]);
});

test("toolCall fingerprints internally; nested key order does not matter", { skip }, async () => {
  const runId = await client.run("manual", async (run) => {
    run.toolCall("lookup", { input: { b: { y: 1, x: [{ k: 2, j: 3 }] }, a: "é" }, output: 1 });
    run.think("again?");
    run.toolCall("lookup", { input: { a: "é", b: { x: [{ j: 3, k: 2 }], y: 1 } } });
    assert.equal(run.loopDetected, true);
    assert.equal(run.checkFingerprint("other", { z: 1 }), false);
    return run.id;
  });
  await client.flush();
  const [group] = await api(`/runs/${runId}/loops`);
  assert.deepEqual(group.step_indices, [1, 3]);
  const run = await api(`/runs/${runId}`);
  assert.equal(run.loop_step_index, 1);
});

test("a thrown error finishes the run with error and is re-thrown", { skip }, async () => {
  const failing = client.observe("flaky", () => { throw new TypeError("bad input"); });
  let runId;
  await assert.rejects(client.run("failing", async (run) => { runId = run.id; failing(1); }), TypeError);
  await client.flush();
  const run = await api(`/runs/${runId}`);
  assert.equal(run.termination_reason, "error");
  assert.equal(run.error, "TypeError: bad input");
  const [step] = await api(`/runs/${runId}/steps`);
  assert.equal(step.error, "TypeError: bad input");
  // The stack goes too: the message, then the frames, the throwing one first.
  for (const trace of [run.error_traceback, step.error_traceback]) {
    assert.ok(trace.startsWith("TypeError: bad input\n    at "), trace);
    assert.match(trace, /sdk\.test\.js/);
  }
});

test("a deep stack is sent bounded, and a thrown string has none", { skip }, async () => {
  const deep = (n) => (n > 0 ? deep(n - 1) : (() => { throw new RangeError("deep"); })());
  const saved = Error.stackTraceLimit;
  Error.stackTraceLimit = 1000;
  let deepId, stringId;
  try {
    await assert.rejects(client.run("deep", async (run) => { deepId = run.id; deep(400); }), RangeError);
  } finally {
    Error.stackTraceLimit = saved;
  }
  await assert.rejects(client.run("thrown-string", async (run) => { stringId = run.id; throw "just a string"; }));
  await client.flush();
  const trace = (await api(`/runs/${deepId}`)).error_traceback;
  assert.ok(trace.length <= TRACEBACK_SENT_MAX, String(trace.length));
  assert.match(trace, /^\u2026 \(\d+ earlier characters cut\)\n    at /);
  const plain = await api(`/runs/${stringId}`);
  assert.equal(plain.error, "just a string");
  assert.equal(plain.error_traceback, null);
});

test("boundTraceback cuts like the Python SDK", () => {
  const text = Array.from({ length: 1000 }, (_, n) => `    at step${n} (agent.js:${n}:1)\n`).join("");
  const bounded = boundTraceback(text, 2048);
  assert.ok(bounded.length <= 2048);
  const [marker, ...rest] = bounded.split("\n");
  const kept = rest.join("\n");
  assert.ok(text.endsWith(kept) && kept.startsWith("    at "));
  assert.equal(marker, `\u2026 (${text.length - kept.length} earlier characters cut)`);
  assert.equal(boundTraceback("short\n", 2048), "short\n");
});

test("nested agents are child runs; concurrent runs never mix", { skip }, async () => {
  const child = client.agent("child", async (n) => n * 2);
  const parent = client.agent("parent", async () => { await child(1); await child(2); return getCurrentRun().id; });
  const tool = client.observe("tick", async (i) => { await new Promise((r) => setTimeout(r, 5)); return i; });
  const worker = client.agent("worker", async (n) => { for (let i = 0; i < n; i++) await tool(i); return getCurrentRun().id; });
  const [parentId, a, b] = await Promise.all([parent(), worker(3), worker(5)]);
  await client.flush();
  assert.equal((await api(`/runs/${parentId}`)).child_runs.length, 2);
  assert.equal((await api(`/runs/${a}`)).step_count, 3);
  assert.equal((await api(`/runs/${b}`)).step_count, 5);
});

test("guards: maxSteps and stopOnLoop", { skip }, async () => {
  const step = client.observe("step", (i) => i);
  const bounded = client.agent("bounded", () => { for (let i = 0; i < 10; i++) step(i); }, { maxSteps: 3 });
  await assert.rejects(bounded(), MaxStepsExceeded);
  const search = client.observe("search", (q) => q);
  const guarded = client.agent("guarded", () => { search("a"); search("b"); search("a"); search("never"); }, { stopOnLoop: true });
  await assert.rejects(guarded(), (error) => error instanceof LoopDetected && error.firstStep === 1 && error.repeatedAt === 3);
  await client.flush();
  const runs = Object.fromEntries((await api("/runs?limit=500")).map((run) => [run.agent_name, run]));
  assert.equal(runs.bounded.termination_reason, "max_steps_reached");
  assert.equal(runs.bounded.step_count, 3);
  assert.equal(runs.guarded.termination_reason, "loop_detected");
});

test("a server that is down never reaches the agent", async () => {
  const messages = [];
  const down = new Keelwave({ apiKey: "kw_" + "x".repeat(43), endpoint: "http://127.0.0.1:9", log: (m) => messages.push(m) });
  const tool = down.observe("t", (i) => i);
  const agent = down.agent("offline", () => { for (let i = 0; i < 1000; i++) tool(i); return "done"; });
  assert.equal(await agent(), "done");
  assert.equal(await down.flush(300), false);
  assert.equal(messages.filter((m) => m.includes("cannot reach")).length, 1);
});

test("no key: a no-op that says so once", () => {
  const messages = [];
  const saved = process.env.KEELWAVE_API_KEY;
  delete process.env.KEELWAVE_API_KEY;
  const silent = new Keelwave({ log: (m) => messages.push(m) });
  if (saved !== undefined) process.env.KEELWAVE_API_KEY = saved;
  assert.equal(silent.enabled, false);
  assert.equal(silent.observe("t", (x) => x + 1)(1), 2);
  assert.equal(messages.length, 1);
});
