// Secrets taken out of what the SDK sends, before it leaves the agent's process:
// the same rules as the Python SDK's keelwave/sdk/_redact.py, and for the same
// input the same bytes (tests/vectors/redaction.json proves it; the rule tables
// below are compared with Python's by tests/test_typescript_sdk.py).
//
// - Keys that look secret: in a JSON object, at any depth, the value under
//   `password`, `api_key`, `access_token`, `Authorization`, `Set-Cookie`… becomes
//   "[REDACTED]". Keys are compared compact: ASCII letters lowercased, "-", "_",
//   "." and spaces dropped (apiKey, X-Api-Key and API_KEY all read …apikey).
//   Counts and settings that only mention tokens (max_tokens, token_count,
//   tokenizer, eos_token, next_page_token) are not secrets: hiding them would make
//   different calls look alike to loop detection. null, booleans and "" stay.
//   Name/value pairs ({"name": "Authorization", "value": …}) and name=value
//   parameters inside strings follow the same rule.
// - Values that look like credentials, wherever they are (only the credential
//   is replaced in longer text): Bearer tokens, sk-… keys, AWS access key ids,
//   GitHub and Slack tokens, Google API keys, JWTs, PEM private keys, keelwave
//   keys, the password of scheme://user:password@host.
//
// Redaction works on the canonical JSON text (canonical.ts): the text sent, the
// SDK's fingerprint and the server's all see the same redacted input. A screen
// looks for the literal fragments every rule needs first, so a payload without
// any costs a few substring searches; only then is the text parsed (numbers kept
// as written), walked and written again, and when nothing was redacted after
// all, the original text is kept.

import { canonicalJson, jsonString } from "./canonical.js";
import { defaultReport, type Report } from "./validate.js";

export const REDACTED = "[REDACTED]";
const REDACTED_JSON = jsonString(REDACTED);

// -- keys ------------------------------------------------------------------------

/** A key is secret when its compact form contains one of these… */
export const SECRET_KEY_PARTS = ["password", "passwd", "passphrase", "secret", "authorization", "cookie", "credential", "apikey", "privatekey", "accesskey", "signingkey", "sessionkey"];
/** … or ends with one of these (accessToken, x-auth-token, id_token; basic_auth, oauth)… */
export const SECRET_KEY_ENDINGS = ["token", "auth"];
/** … or is one of these. */
export const SECRET_KEYS = ["pass", "bearer"];
/** Keys ending in "token" that are not credentials: pagination cursors, tokenizer settings, limits. */
export const NOT_SECRET_TOKEN_ENDINGS = ["pagetoken", "nexttoken", "continuationtoken", "paginationtoken", "resumetoken", "synctoken", "cursortoken", "eostoken", "bostoken", "padtoken", "unktoken", "septoken", "clstoken", "masktoken", "stoptoken", "specialtoken", "starttoken", "endtoken", "maxtoken", "mintoken", "numtoken", "totaltoken"];

/** `key` as the rules compare it: X-Api-Key → xapikey (ASCII letters only, as Python does). */
export function compactKey(key: string): string {
  return key.replace(/[-_. ]/g, "").replace(/[A-Z]/g, (letter) => letter.toLowerCase());
}

function builtinSecretKey(compact: string): boolean {
  if (SECRET_KEYS.includes(compact) || SECRET_KEY_PARTS.some((part) => compact.includes(part))) return true;
  return SECRET_KEY_ENDINGS.some((ending) => compact.endsWith(ending)) && !NOT_SECRET_TOKEN_ENDINGS.some((ending) => compact.endsWith(ending));
}

// What every secret key leaves in the compact text (the whole JSON text lowercased,
// the same characters dropped): in an object, a name/value pair, a name=value parameter.
export const KEY_FRAGMENTS = ["pass", "secret", "auth", "cookie", "credential", "key", 'token"', "token=", "bearer"];

// -- values ----------------------------------------------------------------------

const BEFORE_TOKEN = String.raw`(?<![A-Za-z0-9])`; // not in the middle of a word ("task-…" holds no sk- key)

/**
 * [fragments a match must contain, pattern, replacement]. The patterns are Python's,
 * character for character (explicit ASCII classes, lookarounds, [\s\S]); only the
 * replacements are written the JavaScript way ($1 for Python's \1).
 */
export const VALUE_RULES: readonly (readonly [readonly string[], string, string])[] = [
  // A PEM private key, whole, or to the end of the text when its END line was cut off.
  [["-----BEGIN"], String.raw`-----BEGIN[A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----[\s\S]*?` + String.raw`(?:-----END[A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----|(?![\s\S]))`, REDACTED],
  // A JWT: three base64url parts, the first a JSON header ("eyJ" is '{"').
  [["eyJ"], BEFORE_TOKEN + String.raw`eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*`, REDACTED],
  // "Bearer <token>": the token goes, the word stays; not before a plain word (prose).
  [["earer", "EARER"], String.raw`(?<![A-Za-z0-9])((?:Bearer|bearer|BEARER)[ \t]+)(?![A-Z]?[a-z]+(?![A-Za-z0-9._~+/=-]))` + String.raw`[A-Za-z0-9._~+/-]+=*`, "$1" + REDACTED],
  // OpenAI and Anthropic keys: sk-…, sk-proj-…, sk-ant-api03-…
  [["sk-"], BEFORE_TOKEN + String.raw`sk-[A-Za-z0-9_-]{20,}`, REDACTED],
  // AWS access key ids (long-lived AKIA, temporary ASIA).
  [["AKIA", "ASIA"], String.raw`(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])`, REDACTED],
  // GitHub tokens: personal, OAuth, user-to-server, server-to-server, refresh; fine-grained.
  [["gh", "github_pat_"], BEFORE_TOKEN + String.raw`(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})`, REDACTED],
  // Slack tokens.
  [["xox"], BEFORE_TOKEN + String.raw`xox[baprs]-[A-Za-z0-9-]{10,}`, REDACTED],
  // Google API keys.
  [["AIza"], BEFORE_TOKEN + String.raw`AIza[0-9A-Za-z_-]{30,}`, REDACTED],
  // keelwave's own keys.
  [["kw_"], BEFORE_TOKEN + String.raw`kw_[A-Za-z0-9_-]{40,}`, REDACTED],
  // The password in scheme://user:password@host.
  [["://"], String.raw`(://[^:/?#@ \t\r\n\"'<>]*:)[^/?#@ \t\r\n\"'<>]+(@)`, "$1" + REDACTED + "$2"],
];
/** name=value inside text (URL queries, form bodies, connection strings): hidden when the name is a secret key. */
export const PARAMETER_PATTERN = String.raw`((?:^|[?&;, \t\r\n])([A-Za-z0-9_.-]+)=)([^&#;, \t\r\n\"'<>]+)`;

const RULES = VALUE_RULES.map(([fragments, pattern, replacement]) => [fragments, new RegExp(pattern, "g"), replacement] as const);
const PARAMETER = new RegExp(PARAMETER_PATTERN, "g");
// The value rules' fragments, screened for in the whole JSON text, where they show as
// in the string (JSON never escapes their characters). "Bearer" is left to the key
// screen, which sees it as "bearer"; so is the "=" of a parameter, whose name it sees.
const VALUE_FRAGMENTS = ["-----BEGIN", "eyJ", "sk-", "AKIA", "ASIA", "AIza", "xox", "kw_", "github_pat_"];
const GITHUB = /gh[pousr]_/;
const USERINFO = /:\/\/[^/?#@ "]*@/; // "://" counts only with an "@" before the host ends

// -- the parsed text ---------------------------------------------------------------

// Canonical JSON parsed with its numbers kept as written (JSON.parse would turn a
// 2^60 written by a BigInt into a float, and write it back differently) and its
// objects as entry lists, in the text's (already sorted) order.
class JsonNumber {
  constructor(readonly text: string) {}
}
class JsonObject {
  constructor(readonly entries: [string, Node][]) {}
}
type Node = null | boolean | string | JsonNumber | JsonObject | Node[];

const STRING_TOKEN = /"(?:[^"\\]|\\.)*"/y;
const NUMBER_TOKEN = /-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?/y;

function parse(text: string): Node {
  let at = 0;
  const space = () => {
    while (text[at] === " ") at++;
  };
  const expect = (character: string) => {
    space();
    if (text[at] !== character) throw new SyntaxError(`expected ${character} at ${at}`);
    at++;
  };
  const token = (pattern: RegExp): string => {
    pattern.lastIndex = at;
    const match = pattern.exec(text);
    if (!match) throw new SyntaxError(`unexpected ${text[at]} at ${at}`);
    at = pattern.lastIndex;
    return match[0];
  };
  const value = (): Node => {
    space();
    const character = text[at];
    if (character === '"') return JSON.parse(token(STRING_TOKEN)) as string;
    if (character === "{") {
      at++;
      const entries: [string, Node][] = [];
      space();
      if (text[at] === "}") return at++, new JsonObject(entries);
      for (;;) {
        space();
        const key = JSON.parse(token(STRING_TOKEN)) as string;
        expect(":");
        entries.push([key, value()]);
        space();
        if (text[at] === ",") at++;
        else return expect("}"), new JsonObject(entries);
      }
    }
    if (character === "[") {
      at++;
      const items: Node[] = [];
      space();
      if (text[at] === "]") return at++, items;
      for (;;) {
        items.push(value());
        space();
        if (text[at] === ",") at++;
        else return expect("]"), items;
      }
    }
    for (const [word, literal] of [["null", null], ["true", true], ["false", false]] as const) {
      if (text.startsWith(word, at)) return (at += word.length), literal;
    }
    return new JsonNumber(token(NUMBER_TOKEN));
  };
  const result = value();
  space();
  if (at !== text.length) throw new SyntaxError(`unexpected ${text[at]} at ${at}`);
  return result;
}

function write(node: Node): string {
  if (node === null) return "null";
  if (typeof node === "boolean") return node ? "true" : "false";
  if (typeof node === "string") return jsonString(node);
  if (node instanceof JsonNumber) return node.text;
  if (node instanceof JsonObject) return "{" + node.entries.map(([key, item]) => jsonString(key) + ": " + write(item)).join(", ") + "}";
  return "[" + node.map(write).join(", ") + "]";
}

/** Plain JSON data, for a callback (numbers as JavaScript numbers). */
function plain(node: Node): unknown {
  if (node instanceof JsonNumber) return Number(node.text);
  if (node instanceof JsonObject) return Object.fromEntries(node.entries.map(([key, item]) => [key, plain(item)]));
  if (Array.isArray(node)) return node.map(plain);
  return node;
}

/** null, booleans and "" under a secret key: nothing to hide, and worth seeing. */
function holdsNothing(node: Node): boolean {
  return node === null || typeof node === "boolean" || node === "";
}

// -- the rules, applied --------------------------------------------------------------

export type RedactionOptions = {
  /** More key names to hide, compared as the built-in ones are (compact, anywhere in the key). */
  keys?: string[];
  /** More regular expressions; what they match in any string becomes [REDACTED]. */
  patterns?: (RegExp | string)[];
  /**
   * Called last, with each payload as plain JSON data (a string for error texts and
   * thoughts) after the rules above; what it returns is sent instead. If it throws,
   * that field is sent as "[REDACTED]" (and the log says so, once).
   */
  callback?: (value: unknown) => unknown;
  /** false: leave out the built-in rules, only yours apply. */
  builtin?: boolean;
};

/** What the SDK hides before sending: `new Keelwave({ redact: new Redaction({...}) })` or `{ redact: {...} }`. */
export class Redaction {
  readonly keys: readonly string[];
  readonly patterns: readonly RegExp[];
  readonly callback: ((value: unknown) => unknown) | undefined;
  readonly builtin: boolean;
  /** @internal Where a failure is said (once); the client that makes a Redaction sets its own. */
  report: Report = defaultReport;
  private keyFragments: string[];
  private walkAlways: boolean;
  private verdicts = new Map<string, boolean>(); // key → secret?; agents use few keys

  constructor(options: RedactionOptions = {}) {
    if (options.keys !== undefined && !Array.isArray(options.keys)) throw new RangeError("redact.keys must be an array of key names");
    if (options.patterns !== undefined && !Array.isArray(options.patterns)) throw new RangeError("redact.patterns must be an array of regular expressions");
    this.keys = (options.keys ?? []).map((key) => {
      if (typeof key !== "string" || !compactKey(key)) throw new RangeError(`redact.keys: ${JSON.stringify(key)} is not a key name`);
      return compactKey(key);
    });
    this.patterns = (options.patterns ?? []).map((pattern) =>
      typeof pattern === "string" ? new RegExp(pattern, "g") : new RegExp(pattern.source, pattern.flags.includes("g") ? pattern.flags : pattern.flags + "g"));
    if (options.callback !== undefined && typeof options.callback !== "function") throw new RangeError("redact.callback must be a function");
    this.callback = options.callback;
    this.builtin = options.builtin ?? true;
    // As the keys show in canonical JSON text: anything not ASCII is escaped there.
    this.keyFragments = [...(this.builtin ? KEY_FRAGMENTS : []), ...this.keys.map((key) => jsonString(key).slice(1, -1).toLowerCase())];
    this.walkAlways = this.patterns.length > 0 || this.callback !== undefined;
  }

  /** The canonical JSON text of `value`, redacted: what the SDK sends as tool_input and fingerprints. */
  canonicalJson(value: unknown): string {
    return this.redactJson(canonicalJson(value));
  }

  /** Canonical JSON text → the same, redacted; `text` itself when nothing was. */
  redactJson(text: string): string {
    if (!this.walkAlways && !this.mayHoldSecret(text)) return text;
    try {
      const tree = parse(text);
      const redacted = this.walk(tree);
      if (this.callback !== undefined) return canonicalJson(this.callback(plain(redacted)));
      return redacted === tree ? text : write(redacted);
    } catch (error) {
      this.failed(error); // never send what could not be checked
      return REDACTED_JSON;
    }
  }

  /** Free text (an error, a thought, a tag) → the same, redacted. */
  redactText(text: string): string {
    try {
      let redacted = this.string(text);
      if (this.callback !== undefined) {
        const result = this.callback(redacted);
        redacted = typeof result === "string" ? result : canonicalJson(result);
      }
      return redacted;
    } catch (error) {
      this.failed(error);
      return REDACTED;
    }
  }

  /** Whether the value under `key` is hidden. */
  secretKey(key: string): boolean {
    let verdict = this.verdicts.get(key);
    if (verdict === undefined) {
      const compact = compactKey(key);
      verdict = (this.builtin && builtinSecretKey(compact)) || this.keys.some((extra) => compact.includes(extra));
      if (this.verdicts.size >= 4096) this.verdicts.clear(); // a client sending endless distinct keys
      this.verdicts.set(key, verdict);
    }
    return verdict;
  }

  /** False only when no rule can match anywhere in `text` (canonical JSON). */
  private mayHoldSecret(text: string): boolean {
    if (this.builtin && (VALUE_FRAGMENTS.some((fragment) => text.includes(fragment)) || GITHUB.test(text) || USERINFO.test(text))) return true;
    // Canonical JSON is ASCII (the rest is escaped): the compact form of all its keys and strings.
    const squeezed = text.replace(/[-_. ]/g, "").toLowerCase();
    return this.keyFragments.some((fragment) => squeezed.includes(fragment));
  }

  private walk(node: Node): Node {
    if (typeof node === "string") return this.string(node);
    if (Array.isArray(node)) {
      let copy: Node[] | undefined;
      node.forEach((item, position) => {
        const redacted = this.walk(item);
        if (redacted !== item) (copy ??= [...node])[position] = redacted;
      });
      return copy ?? node;
    }
    if (node instanceof JsonObject) {
      let copy: [string, Node][] | undefined;
      const namesASecret = node.entries.some(([key]) => key === "value") && this.namesASecret(node);
      node.entries.forEach(([key, item], position) => {
        const redacted = this.secretKey(key) || (namesASecret && key === "value") ? (holdsNothing(item) ? item : REDACTED) : this.walk(item);
        if (redacted !== item) (copy ??= [...node.entries])[position] = [key, redacted];
      });
      return copy ? new JsonObject(copy) : node;
    }
    return node;
  }

  /** {"name": "Authorization", "value": …} (or "key"): HTTP header lists, HAR files. */
  private namesASecret(pair: JsonObject): boolean {
    return ["name", "key"].some((field) => {
      const entry = pair.entries.find(([key]) => key === field);
      return entry !== undefined && typeof entry[1] === "string" && this.secretKey(entry[1]);
    });
  }

  private string(text: string): string {
    if (this.builtin) {
      for (const [fragments, pattern, replacement] of RULES) {
        if (fragments.some((fragment) => text.includes(fragment))) text = text.replace(pattern, replacement);
      }
    }
    if ((this.builtin || this.keys.length > 0) && text.includes("=")) {
      text = text.replace(PARAMETER, (match: string, head: string, name: string) => (this.secretKey(name) ? head + REDACTED : match));
    }
    for (const pattern of this.patterns) text = text.replace(pattern, REDACTED);
    return text;
  }

  private failed(error: unknown): void {
    const why = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    this.report("redaction", `redaction failed (${why}); what it failed on is sent as "${REDACTED}"`);
  }
}

/** What redact: true (the default) means, and what runs made by hand use. */
export const DEFAULT_REDACTION = new Redaction();

/** The client's `redact` option: true (or absent) → the built-in rules; false → none. */
export function redactionFrom(option: boolean | RedactionOptions | Redaction | undefined, report: Report): Redaction | null {
  if (option === undefined || option === true) return DEFAULT_REDACTION;
  if (option === false) return null;
  if (option instanceof Redaction) return option;
  if (typeof option === "object" && option !== null && !Array.isArray(option)) {
    const redaction = new Redaction(option);
    redaction.report = report;
    return redaction;
  }
  throw new RangeError(`redact must be true, false, redaction options or a Redaction, not ${String(option)}`);
}
