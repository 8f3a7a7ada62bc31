// What the JavaScript captures (vercel_ai/, mastra/) share: the OTLP/JSON form the fixtures
// are written in, and the AI SDK's scripted mock model they drive. No imports: each capture
// has its own node_modules and passes in what this needs from them.

// --- OTLP/JSON as MessageToDict(use_integers_for_enums=True) + hex ids -------------------

function isDefault(v) {
  return (
    v === undefined || v === null || v === 0 || v === "" || v === false ||
    (Array.isArray(v) && v.length === 0)
  );
}

function strip(obj, order) {
  // Drop scalar/repeated fields at their default; keep message fields even when empty.
  const out = {};
  const keys = order ? [...order, ...Object.keys(obj).filter((k) => !order.includes(k))] : Object.keys(obj);
  for (const k of keys) {
    if (!(k in obj) || isDefault(obj[k])) continue;
    out[k] = obj[k];
  }
  return out;
}

function anyValue(v) {
  // AnyValue is a oneof: the set member is kept even at its default value.
  if (v == null) return {};
  if ("intValue" in v) return { intValue: String(v.intValue) };
  if ("arrayValue" in v) return { arrayValue: strip({ values: (v.arrayValue.values || []).map(anyValue) }) };
  if ("kvlistValue" in v) return { kvlistValue: strip({ values: keyValues(v.kvlistValue.values || []) }) };
  const [k] = Object.keys(v).filter((key) => v[key] !== undefined);
  return k === undefined ? {} : { [k]: v[k] };
}

function keyValues(list) {
  return (list || []).map((kv) => ({ key: kv.key, value: anyValue(kv.value) }));
}

const SPAN_ORDER = [
  "traceId", "spanId", "traceState", "parentSpanId", "flags", "name", "kind",
  "startTimeUnixNano", "endTimeUnixNano", "attributes", "droppedAttributesCount", "events",
  "droppedEventsCount", "links", "droppedLinksCount", "status",
];

export function normalize(request) {
  return strip({
    resourceSpans: (request.resourceSpans || []).map((rs) =>
      strip({
        resource: strip({ ...rs.resource, attributes: keyValues(rs.resource?.attributes) }),
        scopeSpans: (rs.scopeSpans || []).map((ss) =>
          strip({
            scope: strip({ ...ss.scope, attributes: keyValues(ss.scope?.attributes) }),
            spans: (ss.spans || []).map((s) =>
              strip(
                {
                  ...s,
                  attributes: keyValues(s.attributes),
                  events: (s.events || []).map((e) =>
                    strip({ ...e, attributes: keyValues(e.attributes) }, ["timeUnixNano", "name", "attributes"]),
                  ),
                  links: (s.links || []).map((l) => strip({ ...l, attributes: keyValues(l.attributes) })),
                  status: strip(s.status || {}, ["message", "code"]),
                },
                SPAN_ORDER,
              ),
            ),
            schemaUrl: ss.schemaUrl,
          }),
        ),
        schemaUrl: rs.schemaUrl,
      }),
    ),
  });
}

// --- scripted mock models ----------------------------------------------------------------

export function usage(turn) {
  const input = 100 + 10 * turn;
  const output = 20 + turn;
  return {
    inputTokens: { total: input, noCache: input, cacheRead: undefined, cacheWrite: undefined },
    outputTokens: { total: output, text: output, reasoning: undefined },
  };
}

export const toolCall = (turn, toolName, input) => ({ type: "tool-call", toolCallId: `call_${turn}`, toolName, input });
export const text = (t) => ({ type: "text", text: t });

/** A MockLanguageModelV3 answering turn n with script[n] (an array of content parts).
 * ``aiTest``: the capture's own ``ai/test`` module (MockLanguageModelV3,
 * convertArrayToReadableStream): each capture has its own node_modules, this file none. */
export function scriptedModel(aiTest, modelId, script) {
  const { MockLanguageModelV3, convertArrayToReadableStream } = aiTest;
  let turn = 0;
  const next = () => {
    const n = turn++;
    const content = script[Math.min(n, script.length - 1)](n);
    const calls = content.some((c) => c.type === "tool-call");
    return {
      n,
      content,
      finishReason: calls ? { unified: "tool-calls", raw: "tool_calls" } : { unified: "stop", raw: "stop" },
      usage: usage(n),
      response: { id: `resp_${modelId}_${n}`, modelId },
    };
  };
  return new MockLanguageModelV3({
    provider: "fake-provider",
    modelId,
    doGenerate: async () => {
      const { content, finishReason, usage, response } = next();
      return { content, finishReason, usage, response, warnings: [] };
    },
    doStream: async () => {
      const { content, finishReason, usage, response } = next();
      const parts = [{ type: "stream-start", warnings: [] }, { type: "response-metadata", ...response }];
      content.forEach((c, i) => {
        if (c.type === "text") {
          const id = `text_${i}`;
          parts.push({ type: "text-start", id });
          for (const word of c.text.split(/(?<= )/)) parts.push({ type: "text-delta", id, delta: word });
          parts.push({ type: "text-end", id });
        } else {
          parts.push({ type: "tool-input-start", id: c.toolCallId, toolName: c.toolName });
          parts.push({ type: "tool-input-delta", id: c.toolCallId, delta: c.input });
          parts.push({ type: "tool-input-end", id: c.toolCallId });
          parts.push(c);
        }
      });
      parts.push({ type: "finish", finishReason, usage });
      return { stream: convertArrayToReadableStream(parts) };
    },
  });
}
