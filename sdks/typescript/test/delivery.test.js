// Nothing lost, nothing doubled: what the TypeScript SDK does with an event the
// server would refuse, a batch the server refuses, a key it refuses, and events
// left when the process ends while the server is down (the spool directory).
// Against a real `keelwave serve` (tests/test_typescript_sdk.py starts it and
// passes KEELWAVE_TEST_ENDPOINT, KEELWAVE_TEST_SMALL_ENDPOINT for one that takes
// 64 KiB bodies only, and the keys).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import * as fs from "node:fs";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { Keelwave, MAX_TAGS, NAME_MAX_LENGTH, STEP_TYPES } from "../dist/index.js";

const endpoint = process.env.KEELWAVE_TEST_ENDPOINT;
const skip = endpoint ? false : "needs a server: run through pytest tests/test_typescript_sdk.py";
const small = process.env.KEELWAVE_TEST_SMALL_ENDPOINT;
const ingestKey = process.env.KEELWAVE_TEST_INGEST_KEY;
const readKey = process.env.KEELWAVE_TEST_READ_KEY;

function recording(options = {}) {
  const messages = [];
  const client = new Keelwave({ apiKey: ingestKey, endpoint, log: (m) => messages.push(m), ...options });
  return { client, messages, about: (field) => messages.filter((m) => m.startsWith(`keelwave: ${field}`)) };
}

let projectId;
async function get(apiPath) {
  const headers = { Authorization: `Bearer ${readKey}` };
  projectId ??= (await (await fetch(`${endpoint}/v1/me`, { headers })).json()).data.project_id;
  const response = await fetch(`${endpoint}/v1/projects/${projectId}/agent${apiPath}`, { headers });
  return { status: response.status, data: (await response.json()).data };
}

async function stepsOf(runId) {
  const { status, data } = await get(`/runs/${runId}/steps?limit=1000`);
  return status === 200 ? data : [];
}

const unique = (name) => `${name}-${randomUUID().slice(0, 8)}`;

// -- wrong from the start: refused where it is written ---------------------------

test("a step type outside the protocol is refused when the tool is wrapped", () => {
  const { client } = recording();
  assert.throws(() => client.observe("search", (q) => q, { stepType: "tool" }), (error) =>
    error instanceof RangeError && error.message.includes("stepType") && STEP_TYPES.every((type) => error.message.includes(type)));
  assert.throws(() => client.observe("x".repeat(NAME_MAX_LENGTH + 1), () => 1), RangeError);
  assert.throws(() => client.observe("bad\u0000name", () => 1), RangeError);
  assert.throws(() => client.agent("", () => 1), RangeError);
  assert.throws(() => client.agent("tagged", () => 1, { tags: Array.from({ length: MAX_TAGS + 1 }, (_, i) => `t${i}`) }), /tags/);
  assert.throws(() => client.agent("tagged", () => 1, { tags: ["ok", ""] }), /tags/);
});

// -- wrong at run time: the agent goes on, only the bad event is lost -------------

test("bad values at run time drop only their event, each kind said once", { skip }, async () => {
  const { client, about } = recording();
  const tags = ["kept", "bad\u0000tag", "y".repeat(NAME_MAX_LENGTH + 1), ...Array.from({ length: 80 }, (_, i) => `t${i}`)];
  const runId = await client.run(unique("runtime-values"), async (run) => {
    run.toolCall("fine", { input: { i: 1 } });
    for (let i = 0; i < 3; i++) run.toolCall("n".repeat(NAME_MAX_LENGTH + 1), { input: { i } });
    run.toolCall("no-duration", { input: {}, durationMs: NaN });
    run.toolCall("timed", { input: {}, durationMs: 12.5 });
    run.llmCall("openai", "gpt-4o-mini", { inputTokens: 10, outputTokens: 2 });
    run.llmCall("openai", "gpt-4o-mini", { inputTokens: -5 });
    run.llmCall("openai", "", { inputTokens: 1 });
    run.llmCall("openai", "gpt-4o-mini", { inputTokens: 3, costUsd: Infinity });
    return run.id;
  }, { tags });
  assert.equal(await client.flush(30_000), true);
  const run = (await get(`/runs/${runId}`)).data;
  assert.equal(run.termination_reason, "clean");
  assert.equal(run.tags.length, MAX_TAGS);
  assert.equal(run.tags[0], "kept");
  const steps = await stepsOf(runId);
  assert.deepEqual(steps.map((s) => [s.tool_name, s.duration_ms]), [["fine", null], ["no-duration", null], ["timed", 12.5]]);
  const calls = (await get(`/runs/${runId}/llm`)).data;
  assert.deepEqual(calls.map((c) => c.input_tokens).sort((a, b) => a - b), [3, 10]);
  for (const field of ["tool_name", "duration_ms", "input_tokens", "model", "cost_usd"]) assert.equal(about(field).length, 1, field);
  assert.match(about("tool_name")[0], /256/);
  assert.ok(about("tags").length >= 1);
});

test("a run with a bad name or id is not recorded, and the agent goes on", { skip }, async () => {
  const { client, about, messages } = recording();
  const tool = client.observe("tool", (i) => i);
  const long = await client.run("a".repeat(NAME_MAX_LENGTH + 1), (run) => { tool(1); return run; });
  const job = await client.run("job", (run) => { tool(2); return run; }, { runId: "job-42" });
  const goodId = await client.run(unique("good"), (run) => { tool(3); return run.id; });
  assert.equal(await client.flush(30_000), true);
  assert.equal(long.recorded, false);
  assert.equal(job.recorded, false);
  assert.equal((await get(`/runs/${long.id}`)).status, 404);
  assert.equal((await stepsOf(goodId)).length, 1);
  assert.equal(about("agent_name").length, 1);
  assert.equal(messages.filter((m) => m.includes("job-42")).length, 1);
});

// -- refused by the server all the same: split, resend, lose only the bad ones ------

test("one refused event loses only itself", { skip }, async () => {
  const { client, messages } = recording();
  const readFile = client.observe("read_file", (file) => "contents");
  const ids = [];
  for (let r = 0; r < 20; r++) {
    ids.push(await client.run(unique("reader"), (run) => {
      // A lone surrogate (a file name that is not UTF-8): the server cannot parse it.
      for (let i = 0; i < 10; i++) readFile((r === 7 && i === 3) || (r === 12 && i === 5) ? `file-${i}\udcff.txt` : `f${i}`);
      return run.id;
    }));
  }
  const flushed = await client.flush(30_000);
  const counts = await Promise.all(ids.map(async (id) => (await stepsOf(id)).length));
  assert.equal(counts.reduce((a, b) => a + b, 0), 200 - 2);
  for (const id of ids) assert.equal((await get(`/runs/${id}`)).data.termination_reason, "clean");
  assert.equal(flushed, false); // two steps were refused: not everything recorded is stored
  const refused = messages.filter((m) => m.includes("refused"));
  assert.equal(refused.length, 1, refused.join("\n"));
  assert.match(refused[0], /422/); // naming the field that holds it
  assert.match(refused[0], /surrogate/);
});

test("a batch too large for the server is split", { skip: small ? false : skip || "needs a small server" }, async () => {
  const { client, messages } = recording({ endpoint: small });
  const runId = await client.run(unique("bulky"), (run) => {
    for (let i = 0; i < 300; i++) run.toolCall("write", { input: { i, text: "x".repeat(1000) } });
    run.toolCall("write", { input: { text: "y".repeat(100_000) } }); // too large on its own
    run.toolCall("write", { input: { i: "last" } });
    return run.id;
  });
  const flushed = await client.flush(60_000);
  const indices = (await stepsOf(runId)).map((s) => s.step_index);
  assert.deepEqual(indices, [...Array.from({ length: 300 }, (_, i) => i + 1), 302]);
  assert.equal(flushed, false);
  const refused = messages.filter((m) => m.includes("refused"));
  assert.equal(refused.length, 1);
  assert.match(refused[0], /413/);
});

// -- a refused key ---------------------------------------------------------------

for (const [which, key, status, words] of [
  ["an unknown key", "kw_" + "z".repeat(43), "401", "unknown API key"],
  ["a read key", readKey, "403", "scope 'read'"],
]) {
  test(`${which}: flush() resolves to false, and the log says so once`, { skip }, async () => {
    const { client, messages } = recording({ apiKey: key });
    for (let i = 0; i < 3; i++) {
      await client.run(unique("refused"), (run) => run.toolCall("t", { input: {} }));
      assert.equal(await client.flush(30_000), false);
    }
    const said = messages.filter((m) => m.includes("refused the API key"));
    assert.equal(said.length, 1, messages.join("\n"));
    assert.ok(said[0].includes(status) && said[0].includes(words), said[0]);
  });
}

// -- the spool directory -----------------------------------------------------------

async function freePort() {
  const server = net.createServer();
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** A TCP forwarder on `port` to the real server: "the server is back" on that port. */
async function forward(port) {
  const target = new URL(endpoint);
  const sockets = new Set();
  const server = net.createServer((socket) => {
    const upstream = net.connect(Number(target.port), target.hostname);
    for (const s of [socket, upstream]) {
      sockets.add(s);
      s.on("error", () => { socket.destroy(); upstream.destroy(); });
      s.on("close", () => sockets.delete(s));
    }
    socket.pipe(upstream);
    upstream.pipe(socket);
  });
  await new Promise((resolve) => server.listen(port, "127.0.0.1", resolve));
  return () => { for (const s of sockets) s.destroy(); server.close(); };
}

const spoolFiles = (dir) => (fs.existsSync(dir) ? fs.readdirSync(dir).filter((name) => !name.startsWith(".")) : []);

test("events wait in the spool while the server is down, and are sent once it is back", { skip }, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "keelwave-spool-"));
  const offline = `http://127.0.0.1:${await freePort()}`;
  const { client, messages } = recording({ endpoint: offline, spoolDir: dir });
  const runId = await client.run(unique("offline"), (run) => {
    for (let i = 0; i < 30; i++) run.toolCall("search", { input: { q: i % 3 } });
    run.llmCall("openai", "gpt-4o-mini", { inputTokens: 100, outputTokens: 5 });
    return run.id;
  });
  await client.shutdown(300);
  const [written] = spoolFiles(dir);
  assert.match(written, /\.jsonl$/);
  const kinds = fs.readFileSync(path.join(dir, written), "utf8").trim().split("\n").map((line) => JSON.parse(line).kind);
  assert.deepEqual(Object.fromEntries(["run", "step", "ai", "finish"].map((k) => [k, kinds.filter((x) => x === k).length])), { run: 1, step: 30, ai: 1, finish: 1 });
  assert.ok(messages.some((m) => m.includes(dir)));

  const stop = await forward(Number(new URL(offline).port));
  try {
    const later = recording({ endpoint: offline, spoolDir: dir }).client;
    assert.equal(await later.flush(30_000), true);
    assert.deepEqual(spoolFiles(dir), []); // acknowledged, so deleted
    await later.shutdown();
    const other = recording({ endpoint, spoolDir: dir }).client; // another endpoint: nothing of its own
    assert.equal(await other.flush(30_000), true);
    await other.shutdown();
  } finally {
    stop();
  }
  const steps = await stepsOf(runId);
  assert.deepEqual(steps.map((s) => s.step_index), Array.from({ length: 30 }, (_, i) => i + 1));
  const run = (await get(`/runs/${runId}`)).data;
  assert.equal(run.termination_reason, "clean");
  assert.equal(run.llm_calls, 1);
  assert.equal((await get(`/runs/${runId}/loops`)).data.length, 3); // tool_input came back byte for byte
});

test("the spool is written when the process ends", { skip }, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "keelwave-spool-"));
  const port = await freePort();
  const script = `
    import { Keelwave } from "${path.resolve("dist/index.js")}";
    const client = new Keelwave();
    const id = await client.run("exiting", (run) => { for (let i = 0; i < 10; i++) run.toolCall("t", { input: { i } }); return run.id; });
    console.log(id);`;
  const env = { ...process.env, KEELWAVE_API_KEY: ingestKey, KEELWAVE_ENDPOINT: `http://127.0.0.1:${port}`, KEELWAVE_SPOOL_DIR: dir };
  const result = spawnSync("node", ["--input-type=module", "-e", script], { env, encoding: "utf8", timeout: 60_000 });
  assert.equal(result.status, 0, result.stderr);
  assert.ok(result.stderr.includes(dir), result.stderr);
  assert.equal(spoolFiles(dir).length, 1);
  const stop = await forward(port);
  try {
    const later = new Keelwave({ apiKey: ingestKey, endpoint: `http://127.0.0.1:${port}`, spoolDir: dir, log: () => {} });
    assert.equal(await later.flush(30_000), true);
    await later.shutdown();
  } finally {
    stop();
  }
  assert.deepEqual(spoolFiles(dir), []);
  assert.equal((await stepsOf(result.stdout.trim())).length, 10);
});
