// Tool inputs as canonical JSON text, byte for byte what Python's
// json.dumps(value, sort_keys=True) writes, and their fingerprints.
//
// That means: keys sorted by code point at every depth; ", " and ": " as
// separators; every character outside printable ASCII escaped as \uXXXX
// (UTF-16 code units, lowercase hex); floats written as Python's repr writes
// them (1e-07, 1e+16, 0.0001). JavaScript has a single number type: safe
// integers are written as Python writes ints, every other number as Python
// writes floats, so an integer-valued float (3.0 in Python) is the one input
// the two languages cannot agree on.
//
// Values JSON cannot encode never throw; they are replaced deterministically,
// as the Python SDK does: Set → sorted array, Map → object with string keys,
// Uint8Array/Buffer → {"$bytes": base64}, Date → ISO string, BigInt → its
// digits, NaN/±Infinity → "NaN"/"Infinity"/"-Infinity", a container inside
// itself → "<cycle>", functions and symbols → "<function>"/"<symbol>".

import { createHash } from "node:crypto";

export function canonicalJson(value: unknown): string {
  return write(value, new Set());
}

export function fingerprint(toolName: string, inputJson: string): Buffer {
  return createHash("sha256").update(toolName, "utf8").update(Buffer.from([0])).update(inputJson, "utf8").digest();
}

function write(value: unknown, seen: Set<object>): string {
  if (value === null || value === undefined) return "null";
  switch (typeof value) {
    case "boolean":
      return value ? "true" : "false";
    case "number":
      return number(value);
    case "bigint":
      return value.toString();
    case "string":
      return string(value);
    case "function":
      return string("<function>");
    case "symbol":
      return string("<symbol>");
  }
  const object = value as object;
  if (seen.has(object)) return string("<cycle>");
  seen.add(object);
  try {
    if (Array.isArray(object)) return "[" + object.map((item) => write(item, seen)).join(", ") + "]";
    if (object instanceof Date) return string(Number.isNaN(object.getTime()) ? "Invalid Date" : object.toISOString());
    if (object instanceof Uint8Array) return "{" + string("$bytes") + ": " + string(Buffer.from(object).toString("base64")) + "}";
    if (object instanceof Set) {
      const items = [...object].map((item) => write(item, seen));
      return "[" + items.sort(byCodePoint).join(", ") + "]";
    }
    if (object instanceof Map) return writeObject([...object].map(([k, v]) => [String(k), v]), seen);
    const toJSON = (object as { toJSON?: () => unknown }).toJSON;
    if (typeof toJSON === "function") return write(toJSON.call(object), seen);
    return writeObject(Object.entries(object), seen);
  } finally {
    seen.delete(object);
  }
}

function writeObject(entries: [string, unknown][], seen: Set<object>): string {
  const kept = entries.filter(([, v]) => v !== undefined && typeof v !== "function" && typeof v !== "symbol");
  kept.sort(([a], [b]) => byCodePoint(a, b));
  return "{" + kept.map(([k, v]) => string(k) + ": " + write(v, seen)).join(", ") + "}";
}

// Python compares strings by code point; JavaScript's < compares UTF-16 units,
// which disagrees for characters beyond U+FFFF.
function byCodePoint(a: string, b: string): number {
  const x = Array.from(a), y = Array.from(b);
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const d = x[i].codePointAt(0)! - y[i].codePointAt(0)!;
    if (d !== 0) return d;
  }
  return x.length - y.length;
}

/** A string as JSON text, escaped as Python's json.dumps escapes it (for redact.ts). */
export { string as jsonString };

const SHORT: Record<string, string> = { '"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f" };

function string(text: string): string {
  let out = '"';
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    const code = text.charCodeAt(i);
    if (SHORT[ch]) out += SHORT[ch];
    else if (code < 0x20 || code > 0x7e) out += "\\u" + code.toString(16).padStart(4, "0");
    else out += ch;
  }
  return out + '"';
}

function number(value: number): string {
  if (Number.isNaN(value)) return string("NaN");
  if (!Number.isFinite(value)) return string(value > 0 ? "Infinity" : "-Infinity");
  if (Object.is(value, -0)) return "-0.0";
  if (Number.isSafeInteger(value)) return String(value);
  // Python's repr: the shortest digits that round-trip, in fixed notation for
  // exponents -4..15 and scientific (two-digit exponent at least) otherwise.
  const [mantissa, exponentText] = value.toExponential().split("e");
  const exponent = Number(exponentText);
  const negative = mantissa.startsWith("-");
  const digits = mantissa.replace("-", "").replace(".", "");
  const sign = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) return `${sign}0.${"0".repeat(-exponent - 1)}${digits}`;
    const whole = digits.slice(0, exponent + 1).padEnd(exponent + 1, "0");
    const fraction = digits.slice(exponent + 1) || "0";
    return `${sign}${whole}.${fraction}`;
  }
  const body = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
  const expSign = exponent < 0 ? "-" : "+";
  return `${sign}${body}e${expSign}${String(Math.abs(exponent)).padStart(2, "0")}`;
}
