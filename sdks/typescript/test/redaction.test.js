// Redaction (src/redact.ts): the shared vectors (tests/vectors/redaction.json, the
// same bytes as the Python SDK), the options, the screen never deciding anything
// the full walk would not, and, against a real `keelwave serve` (started by
// tests/test_typescript_sdk.py), no secret reaching the server while repeated
// calls that differ only in a secret still group as a loop.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { Keelwave, Redaction, REDACTED, Run, canonicalJson, fingerprint } from "../dist/index.js";

const shared = JSON.parse(readFileSync(new URL("../../../tests/vectors/redaction.json", import.meta.url)));
const builtin = new Redaction();

for (const vector of shared.vectors) {
  test(`redacted canonical JSON and fingerprint: ${vector.name}`, () => {
    const text = builtin.canonicalJson(vector.input);
    assert.equal(text, vector.redacted);
    assert.equal(fingerprint(vector.tool_name, text).toString("base64"), vector.fingerprint);
  });
}

test("redacted free text agrees with the shared vectors", () => {
  for (const { text, redacted } of shared.texts) assert.equal(builtin.redactText(text), redacted);
});

test("redacting redacted text again changes nothing", () => {
  for (const vector of shared.vectors) assert.equal(builtin.redactJson(vector.redacted), vector.redacted);
});

test("counts and settings that mention tokens are not secrets", () => {
  const input = { max_tokens: 512, tokens: 3, token_count: 7, input_tokens: 1, prompt_tokens: 2, tokenizer: "cl100k", next_page_token: "p2", eos_token: "</s>", session_id: "s" };
  assert.equal(builtin.canonicalJson(input), canonicalJson(input));
  for (const key of ["apiKey", "X-Api-Key", "ACCESS_TOKEN", "refreshToken", "id_token", "Set-Cookie", "client_secret", "private_key", "Authorization"]) {
    assert.equal(builtin.secretKey(key), true, key);
  }
});

test("a payload without secrets is sent as canonical JSON, byte for byte", () => {
  const input = { q: "what is keelwave?", max_results: 3, nested: [{ a: 1.5, b: "caf\u00e9" }] };
  assert.equal(builtin.canonicalJson(input), canonicalJson(input));
  const big = 2n ** 60n; // a number JSON.parse would turn into a float: the walk keeps it as written
  assert.equal(builtin.canonicalJson({ n: big, password: "x" }), `{"n": ${big}, "password": "[REDACTED]"}`);
});

test("extra keys and patterns; a callback after the built-in rules", () => {
  const seen = [];
  const redaction = new Redaction({
    keys: ["ssn"],
    patterns: [/\b[\w.]+@example\.com\b/, "acct-[0-9]+"],
    callback: (value) => {
      seen.push(value);
      return typeof value === "string" ? value.toUpperCase() : { ...value, checked: true };
    },
  });
  const text = redaction.canonicalJson({ customer_SSN: "123-45-6789", note: "mail ada@example.com about acct-42", password: "x" });
  assert.deepEqual(seen[0], { customer_SSN: REDACTED, note: `mail ${REDACTED} about ${REDACTED}`, password: REDACTED });
  assert.equal(text, '{"checked": true, "customer_SSN": "[REDACTED]", "note": "mail [REDACTED] about [REDACTED]", "password": "[REDACTED]"}');
  assert.equal(redaction.redactText("token sk-" + "a".repeat(24)), "TOKEN [REDACTED]");
});

test("builtin: false leaves only your own rules", () => {
  const redaction = new Redaction({ builtin: false, keys: ["internal_id"] });
  assert.equal(redaction.canonicalJson({ password: "x", internal_id: 7, url: "https://h/?internal_id=9&token=t" }),
    '{"internal_id": "[REDACTED]", "password": "x", "url": "https://h/?internal_id=[REDACTED]&token=t"}');
});

test("a callback that throws: the field goes as [REDACTED], said once", () => {
  const messages = [];
  const client = new Keelwave({ apiKey: "kw_" + "x".repeat(43), endpoint: "http://127.0.0.1:9", log: (m) => messages.push(m), redact: { callback: () => { throw new Error("boom"); } } });
  assert.equal(client.redaction.canonicalJson({ a: 1 }), '"[REDACTED]"');
  assert.equal(client.redaction.redactText("hello"), REDACTED);
  assert.equal(messages.filter((m) => m.includes("redaction failed (Error: boom)")).length, 1);
  void client.shutdown(10);
});

test("the redact option: off, or refused when it is not one", () => {
  const offline = { apiKey: "kw_" + "x".repeat(43), endpoint: "http://127.0.0.1:9", log: () => {} };
  const off = new Keelwave({ ...offline, redact: false });
  assert.equal(off.redaction, null);
  assert.ok(new Keelwave(offline).redaction instanceof Redaction);
  assert.throws(() => new Keelwave({ ...offline, redact: "yes" }), RangeError);
  assert.throws(() => new Redaction({ patterns: ["("] }), SyntaxError);
  void off.shutdown(10);
});

test("what a run sends is redacted; its fingerprints are of what it sends", () => {
  const events = [];
  const run = new Run((event) => events.push(event), "agent", null, { input: { token: "tok0qx9z" }, metadata: { api_key: "k" }, tags: ["user:" + "sk-" + "z".repeat(24)] });
  // Secrets no path or stack trace could hold by chance (the error's stack names files).
  run.toolCall("search", { input: { q: "a", auth: { token: "tok1qx9z" } }, output: { cookie: "c" }, error: new Error("Bearer abcdef123456 refused") });
  run.toolCall("search", { input: { q: "a", auth: { token: "tok2qx9z" } } });
  assert.equal(run.loopDetected, true); // only the secret differs: the same call
  run.think("my password=hunter2");
  run.llmCall("openai", "gpt-4o", { error: "Incorrect API key provided: sk-" + "y".repeat(30) });
  run.finish("clean", { output: { secret: "s" }, error: "AKIAIOSFODNN7EXAMPLE" });
  const sent = events.map((event) => event.body).join("\n");
  for (const secret of ["tok0qx9z", '"k"', "zzzz", "tok1qx9z", "tok2qx9z", "abcdef123456", "hunter2", "yyyy", '"s"', "AKIAIOSFODNN7EXAMPLE", '"c"']) assert.ok(!sent.includes(secret), secret);
  const step = JSON.parse(events.find((event) => event.kind === "step").body);
  assert.deepEqual(step.tool_input, { auth: REDACTED, q: "a" });
  const unredacted = new Run(() => {}, "agent", null, {}, undefined, null);
  unredacted.toolCall("search", { input: { token: "one" } });
  unredacted.toolCall("search", { input: { token: "two" } });
  assert.equal(unredacted.loopDetected, false); // without redaction, two different calls
});

// The screen only decides when the walk is worth it: it must never say "nothing here"
// where the walk would redact. A pattern that never matches forces the walk.
test("the screen never skips what the walk would redact", () => {
  const walked = new Redaction({ patterns: [/(?!)/] });
  const pieces = ["pa_ss", "PASS", "to_ken", "tok-en", "Token", "api.key", "Api Key", "AUTH", "o_auth", "x-auth-token", "bearer", "Bearer x1y2z3w4", "sk-", "sk-" + "a".repeat(20), "AKIA" + "A".repeat(16),
    "ghp_" + "b".repeat(30), "github_pat_" + "c".repeat(30), "xoxb-" + "1".repeat(10), "AIza" + "d".repeat(30), "eyJ" + "e".repeat(8) + "." + "f".repeat(8) + ".", "kw_" + "g".repeat(40),
    "-----BEGIN EC PRIVATE KEY-----", "://u:p@h", "?password=x", "&token=y", " secret=z", "caf\u00e9", "\n", "\t", '"', "\\", "=", ":", "@", "_", "-", ".", " ", "max_tokens", "value", "name", "key"];
  let seed = 7;
  const next = (n) => (seed = (seed * 1103515245 + 12345) % 2147483648) % n;
  const text = () => Array.from({ length: 1 + next(4) }, () => pieces[next(pieces.length)]).join(next(2) ? "" : " ");
  const value = (depth) => {
    const kind = next(depth > 2 ? 2 : 4);
    if (kind === 0) return text();
    if (kind === 1) return next(3) === 0 ? null : next(100);
    if (kind === 2) return Array.from({ length: next(3) }, () => value(depth + 1));
    return Object.fromEntries(Array.from({ length: 1 + next(3) }, () => [next(3) ? text() : ["name", "key", "value"][next(3)], value(depth + 1)]));
  };
  for (let i = 0; i < 3000; i++) {
    const input = value(0);
    assert.equal(builtin.canonicalJson(input), walked.canonicalJson(input), JSON.stringify(input));
  }
});

// -- against a real server -----------------------------------------------------------

const endpoint = process.env.KEELWAVE_TEST_ENDPOINT;
const skip = endpoint ? false : "needs a server: run through pytest tests/test_typescript_sdk.py";

async function api(path) {
  const headers = { Authorization: `Bearer ${process.env.KEELWAVE_TEST_READ_KEY}` };
  const me = await (await fetch(`${endpoint}/v1/me`, { headers })).json();
  const response = await fetch(`${endpoint}/v1/projects/${me.data.project_id}/agent${path}`, { headers });
  assert.equal(response.status, 200, await response.clone().text());
  return (await response.json()).data;
}

test("no secret reaches the server, and repeated calls still group as a loop", { skip }, async () => {
  const client = new Keelwave({ apiKey: process.env.KEELWAVE_TEST_INGEST_KEY, endpoint });
  const tokens = ["tok-" + "a".repeat(12), "tok-" + "b".repeat(12), "tok-" + "c".repeat(12)];
  const secrets = [...tokens, "hunter2", "sk-proj-" + "Q".repeat(32), "AKIAIOSFODNN7EXAMPLE", "s3cr3t-meta", "xyzzy-output"];
  const search = client.observe("search", async (params) => ({ hits: 1, session: { cookie: "xyzzy-output" } }));
  const failing = client.observe("login", () => { throw new Error("login refused for password=hunter2"); });
  const runId = await client.run("redacting-agent", async (run) => {
    for (const token of tokens) await search({ q: "revenue", headers: { Authorization: `Bearer ${token}` }, nested: [{ api_key: "sk-proj-" + "Q".repeat(32) }] });
    assert.throws(() => failing({ user: "bob" }));
    run.think("the key is AKIAIOSFODNN7EXAMPLE");
    run.llmCall("openai", "gpt-4o-mini", { error: "Incorrect API key provided: sk-proj-" + "Q".repeat(32) });
    return run.id;
  }, { input: { password: "hunter2" }, metadata: { client_secret: "s3cr3t-meta" } });
  assert.ok(await client.flush());
  const stored = JSON.stringify([await api(`/runs/${runId}`), await api(`/runs/${runId}/steps`), await api(`/runs/${runId}/llm`)]);
  for (const secret of secrets) assert.ok(!stored.includes(secret), secret);
  assert.ok(stored.includes(REDACTED));
  const expected = fingerprint("search", client.redaction.canonicalJson({ q: "revenue", headers: { Authorization: "Bearer other" }, nested: [{ api_key: "k" }] })).toString("base64");
  assert.deepEqual(await api(`/runs/${runId}/loops`), [{ fingerprint: expected, hits: 3, step_indices: [1, 2, 3], tool_name: "search" }]);
  await client.shutdown();
});
