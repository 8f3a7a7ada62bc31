// The shared vectors (tests/vectors/fingerprints.json, written from Python's
// json.dumps(sort_keys=True)): the same input, the same bytes, the same hash.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { canonicalJson, fingerprint } from "../dist/index.js";

const vectors = JSON.parse(readFileSync(new URL("../../../tests/vectors/fingerprints.json", import.meta.url))).vectors;

for (const vector of vectors) {
  test(`canonical JSON and fingerprint: ${vector.tool_name}`, () => {
    const text = canonicalJson(vector.input);
    assert.equal(text, vector.canonical);
    assert.equal(fingerprint(vector.tool_name, text).toString("base64"), vector.fingerprint);
  });
}

test("key order never matters, at any depth", () => {
  const a = canonicalJson({ b: { y: 1, x: [{ k: 2, j: 3 }] }, a: "é" });
  const b = canonicalJson({ a: "é", b: { x: [{ j: 3, k: 2 }], y: 1 } });
  assert.equal(a, b);
  assert.equal(a, '{"a": "\\u00e9", "b": {"x": [{"j": 3, "k": 2}], "y": 1}}');
});

test("unencodable values never throw", () => {
  const cyclic = [1];
  cyclic.push(cyclic);
  assert.equal(canonicalJson(cyclic), '[1, "<cycle>"]');
  assert.equal(canonicalJson(new Set([3, 1, 2])), "[1, 2, 3]");
  assert.equal(canonicalJson({ n: NaN, f: () => 1, u: undefined }), '{"n": "NaN"}');
  assert.equal(canonicalJson(Buffer.from([0, 255])), '{"$bytes": "AP8="}');
  assert.equal(canonicalJson(10n), "10");
});
