// Mastra (`@mastra/core`) agents traced by Mastra's own observability (`@mastra/observability`)
// and exported as OpenTelemetry spans by `@mastra/otel-exporter`, driven by the AI SDK's
// `MockLanguageModelV3` (from `ai/test`): no network, no API keys.
//
// Mastra does not trace through the global OpenTelemetry API: its observability bus builds
// its own spans, and the OtelExporter converts each *ended* Mastra span into an OpenTelemetry
// ReadableSpan (scope `@mastra/otel-exporter`, its own resource) and hands it to its own
// BatchSpanProcessor, in front of the OTLP exporter of the configured protocol. The exporter's
// `exporter` option (documented in its types: `exporter?: SpanExporter`) replaces that OTLP
// exporter; here it is an InMemorySpanExporter, and each scenario's spans are encoded with the
// JS exporter's own serializer (`JsonTraceSerializer` of @opentelemetry/otlp-transformer, what
// the OTLP/HTTP JSON exporter `@opentelemetry/exporter-trace-otlp-http` sends), then normalised
// like the other fixtures (see ../vercel_ai/capture.mjs): 64-bit integers (`intValue`) become
// strings and fields at their default value are dropped, as protobuf's `MessageToDict` does.
//
// The model call of turn n (0-based, per model) reports input 100 + 10n, output 20 + n tokens.
// Tool arguments are sent as the raw string `{"city": "Paris",  "unit": "celsius"}` (two
// spaces, on purpose).
//
//   npm ci && node capture.mjs   (writes ../../mastra_<scenario>.json, or into $FIXTURES_DIR)

import net from "node:net";
import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { Agent } from "@mastra/core/agent";
import { Mastra } from "@mastra/core/mastra";
import { createTool } from "@mastra/core/tools";
import { Observability } from "@mastra/observability";
import { OtelExporter } from "@mastra/otel-exporter";
import { JsonTraceSerializer } from "@opentelemetry/otlp-transformer";
import { InMemorySpanExporter } from "@opentelemetry/sdk-trace-base";
import * as aiTest from "ai/test";
import { z } from "zod";
import { normalize, scriptedModel as mockModel, text, toolCall } from "../ai_sdk_shared.mjs";

/** A scripted AI SDK model (../ai_sdk_shared.mjs) built on this capture's `ai/test`. */
const scriptedModel = (modelId, script) => mockModel(aiTest, modelId, script);

// Mastra's product telemetry (PostHog) is on by default; this is its documented switch.
process.env.MASTRA_TELEMETRY_DISABLED = "1";

// Fail loudly if anything tries to open a socket (the fake model and in-memory exporter need none).
const connectAttempts = [];
const originalConnect = net.Socket.prototype.connect;
net.Socket.prototype.connect = function (...args) {
  connectAttempts.push(JSON.stringify(args[0]));
  return originalConnect.apply(this, args);
};

const FIXTURES = process.env.FIXTURES_DIR ?? join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const LOOP_ARGS = '{"city": "Paris",  "unit": "celsius"}';
const PROMPT = "Weather in Paris?";
const SERVICE_NAME = "keelwave-capture-mastra";

// --- tracing -----------------------------------------------------------------------------

/** A Mastra app with these agents and an OtelExporter whose OTLP exporter is in memory. */
function mastraApp(agents) {
  const memoryExporter = new InMemorySpanExporter();
  const otel = new OtelExporter({
    // The generic OTLP/HTTP JSON endpoint (never reached: `exporter` below replaces the
    // exporter that would be loaded for it); logs off (no OTLP log exporter installed).
    provider: { custom: { endpoint: "http://127.0.0.1:4318/v1/traces", protocol: "http/json" } },
    exporter: memoryExporter,
    signals: { logs: false },
  });
  const observability = new Observability({
    configs: { otel: { serviceName: SERVICE_NAME, exporters: [otel] } },
  });
  const mastra = new Mastra({ agents, observability, logger: false });
  return { mastra, observability, memoryExporter };
}

async function save(app, name) {
  // Awaits the bus's in-flight span handlers, then the exporter's BatchSpanProcessor.
  await app.observability.flush();
  const spans = app.memoryExporter.getFinishedSpans();
  await app.mastra.shutdown(); // (an InMemorySpanExporter forgets its spans when shut down)
  const bytes = JsonTraceSerializer.serializeRequest(spans);
  const body = normalize(JSON.parse(new TextDecoder().decode(bytes)));
  const path = join(FIXTURES, `${name}.json`);
  writeFileSync(path, JSON.stringify(body, null, 2) + "\n");
  console.log(`${name}.json: ${spans.length} spans`);
}

const loopScript = [
  (n) => [toolCall(n, "get_weather", LOOP_ARGS)],
  (n) => [toolCall(n, "get_weather", LOOP_ARGS)],
  (n) => [toolCall(n, "get_weather", LOOP_ARGS)],
  () => [text("It is 18 degrees in Paris.")],
];

// --- tools -------------------------------------------------------------------------------

const get_weather = createTool({
  id: "get_weather",
  description: "Current weather for a city.",
  inputSchema: z.object({ city: z.string(), unit: z.string().default("celsius") }),
  execute: async ({ city, unit }) => `18 degrees ${unit} in ${city}`,
});

const fetch_page = createTool({
  id: "fetch_page",
  description: "Fetch a web page.",
  inputSchema: z.object({ url: z.string() }),
  execute: async ({ url }) => {
    throw new Error(`connection refused: ${url}`);
  },
});

function weatherAgent(model) {
  return new Agent({
    id: "weather_agent",
    name: "weather_agent",
    instructions: "You are a weather assistant.",
    model,
    tools: { get_weather },
  });
}

// --- scenarios ---------------------------------------------------------------------------

async function loop() {
  const app = mastraApp({ weather_agent: weatherAgent(scriptedModel("fake-loop-model", loopScript)) });
  const result = await app.mastra.getAgent("weather_agent").generate(PROMPT, { maxSteps: 10 });
  console.log(`  ${result.finishReason}: ${result.text}`);
  await save(app, "mastra_loop");
}

async function stream() {
  const app = mastraApp({ weather_agent: weatherAgent(scriptedModel("fake-loop-model", loopScript)) });
  const result = await app.mastra.getAgent("weather_agent").stream(PROMPT, { maxSteps: 10 });
  for await (const _part of result.fullStream) {
    // consume every part
  }
  console.log(`  ${await result.finishReason}: ${await result.text}`);
  await save(app, "mastra_stream");
}

async function toolError() {
  const fetch_agent = new Agent({
    id: "fetch_agent",
    name: "fetch_agent",
    instructions: "You fetch web pages.",
    model: scriptedModel("fake-error-model", [
      (n) => [toolCall(n, "fetch_page", '{"url": "https://example.com/"}')],
      () => [text("I could not fetch the page: the connection was refused.")],
    ]),
    tools: { fetch_page },
  });
  const app = mastraApp({ fetch_agent });
  const result = await app.mastra.getAgent("fetch_agent").generate("Fetch https://example.com/", { maxSteps: 10 });
  console.log(`  ${result.finishReason}: ${result.text}`);
  await save(app, "mastra_tool_error");
}

/** Mastra's own sub-agents: `agents: { weather_expert }` gives the supervisor a tool `agent-weather_expert`. */
async function nested() {
  const weather_expert = new Agent({
    id: "weather_expert",
    name: "weather_expert",
    description: "Answers questions about the weather.",
    instructions: "You are a weather expert.",
    model: scriptedModel("fake-inner-model", [
      (n) => [toolCall(n, "get_weather", LOOP_ARGS)],
      () => [text("18 degrees celsius in Paris.")],
    ]),
    tools: { get_weather },
  });
  const coordinator = new Agent({
    id: "coordinator",
    name: "coordinator",
    instructions: "Delegate weather questions to the weather expert.",
    model: scriptedModel("fake-outer-model", [
      (n) => [toolCall(n, "agent-weather_expert", '{"prompt": "Weather in Paris?"}')],
      () => [text("The expert says: 18 degrees celsius in Paris.")],
    ]),
    agents: { weather_expert },
  });
  const app = mastraApp({ coordinator, weather_expert });
  const result = await app.mastra.getAgent("coordinator").generate(PROMPT, { maxSteps: 10 });
  console.log(`  ${result.finishReason}: ${result.text}`);
  await save(app, "mastra_nested");
}

/** A plain tool whose `execute` runs another registered agent (`context.mastra.getAgent(...)`). */
async function nestedTool() {
  const researcher = new Agent({
    id: "researcher",
    name: "researcher",
    instructions: "You are a weather researcher.",
    model: scriptedModel("fake-inner-model", [
      (n) => [toolCall(n, "get_weather", LOOP_ARGS)],
      () => [text("18 degrees celsius in Paris.")],
    ]),
    tools: { get_weather },
  });
  const ask_researcher = createTool({
    id: "ask_researcher",
    description: "Ask the weather researcher.",
    inputSchema: z.object({ question: z.string() }),
    execute: async ({ question }, context) => {
      // No tracingContext passed on: the agent that `context.mastra` hands out nests its run
      // under this tool call by itself.
      const inner = await context.mastra.getAgent("researcher").generate(question, { maxSteps: 10 });
      return inner.text;
    },
  });
  const coordinator = new Agent({
    id: "coordinator",
    name: "coordinator",
    instructions: "Ask the researcher about the weather.",
    model: scriptedModel("fake-outer-model", [
      (n) => [toolCall(n, "ask_researcher", '{"question": "Weather in Paris?"}')],
      () => [text("The researcher says: 18 degrees celsius in Paris.")],
    ]),
    tools: { ask_researcher },
  });
  const app = mastraApp({ coordinator, researcher });
  const result = await app.mastra.getAgent("coordinator").generate(PROMPT, { maxSteps: 10 });
  console.log(`  ${result.finishReason}: ${result.text}`);
  await save(app, "mastra_nested_tool");
}

async function maxSteps() {
  const model = scriptedModel("fake-loop-model", [(n) => [toolCall(n, "get_weather", LOOP_ARGS)]]);
  const app = mastraApp({ weather_agent: weatherAgent(model) });
  const result = await app.mastra.getAgent("weather_agent").generate(PROMPT, { maxSteps: 2 });
  console.log(`  stopped after ${result.steps.length} steps, finishReason=${result.finishReason}`);
  await save(app, "mastra_max_steps");
}

await loop();
await toolError();
await nested();
await nestedTool();
await maxSteps();
await stream();
if (connectAttempts.length) {
  console.error(`socket connections attempted: ${connectAttempts.join(", ")}`);
  process.exit(1);
}
