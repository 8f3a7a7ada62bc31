// Vercel AI SDK (npm `ai`), built-in OpenTelemetry telemetry
// (`experimental_telemetry: { isEnabled: true, ... }`), driven by the SDK's own
// `MockLanguageModelV3` (from `ai/test`): no network, no API keys.
//
// Spans go through a BatchSpanProcessor into an InMemorySpanExporter (NodeTracerProvider:
// a BasicTracerProvider plus the AsyncLocalStorage context manager, registered globally so
// the SDK's `trace.getTracer("ai")` finds it). Each scenario's spans are encoded with the
// JS exporter's own serializer (`JsonTraceSerializer` of @opentelemetry/otlp-transformer,
// what the OTLP/HTTP JSON exporter sends), then normalised to the form of the other
// fixtures (`_otlp.py`'s `to_otlp_json`): ids are already hex and enums integers; 64-bit
// integers (`intValue`) become strings and fields at their default value are dropped,
// as protobuf's `MessageToDict` does.
//
// The model call of turn n (0-based, per model) reports input 100 + 10n, output 20 + n
// tokens. Tool arguments are sent as the raw string `{"city": "Paris",  "unit": "celsius"}`
// (two spaces, on purpose).
//
//   npm ci && node capture.mjs   (writes ../../vercelai_<scenario>.json, or into $FIXTURES_DIR)

import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { JsonTraceSerializer } from "@opentelemetry/otlp-transformer";
import { defaultResource, resourceFromAttributes } from "@opentelemetry/resources";
import { BatchSpanProcessor, InMemorySpanExporter } from "@opentelemetry/sdk-trace-base";
import { NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import { generateText, stepCountIs, streamText, tool, ToolLoopAgent } from "ai";
import * as aiTest from "ai/test";
import { z } from "zod";
import { normalize, scriptedModel as mockModel, text, toolCall } from "../ai_sdk_shared.mjs";

/** A scripted AI SDK model (../ai_sdk_shared.mjs) built on this capture's `ai/test`. */
const scriptedModel = (modelId, script) => mockModel(aiTest, modelId, script);

const FIXTURES = process.env.FIXTURES_DIR ?? join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const LOOP_ARGS = '{"city": "Paris",  "unit": "celsius"}';
const PROMPT = "Weather in Paris?";

// --- tracing -----------------------------------------------------------------------------

const exporter = new InMemorySpanExporter();
const provider = new NodeTracerProvider({
  // The SDK's default resource (telemetry.sdk.*) with our service name, as a NodeSDK sets up.
  resource: defaultResource().merge(resourceFromAttributes({ "service.name": "keelwave-capture-vercelai" })),
  // The processor real deployments use: spans are queued as they *end*.
  spanProcessors: [new BatchSpanProcessor(exporter)],
});
provider.register();

function telemetry(functionId = "weather_agent") {
  return { isEnabled: true, functionId, recordInputs: true, recordOutputs: true };
}

async function save(name) {
  await provider.forceFlush();
  const spans = exporter.getFinishedSpans();
  exporter.reset();
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

const get_weather = tool({
  description: "Current weather for a city.",
  inputSchema: z.object({ city: z.string(), unit: z.string().default("celsius") }),
  execute: async ({ city, unit }) => `18 degrees ${unit} in ${city}`,
});

const fetch_page = tool({
  description: "Fetch a web page.",
  inputSchema: z.object({ url: z.string() }),
  execute: async ({ url }) => {
    throw new Error(`connection refused: ${url}`);
  },
});

const lookup = tool({
  description: "Look a term up in the encyclopedia.",
  inputSchema: z.object({ term: z.string() }),
  execute: async ({ term }) => `${term}: the backbone of a ship.`,
});

// --- scenarios ---------------------------------------------------------------------------

async function loop() {
  const result = await generateText({
    model: scriptedModel("fake-loop-model", loopScript),
    tools: { get_weather },
    stopWhen: stepCountIs(10),
    prompt: PROMPT,
    experimental_telemetry: telemetry(),
  });
  console.log(result.text);
  await save("vercelai_loop");
}

async function toolError() {
  const result = await generateText({
    model: scriptedModel("fake-error-model", [
      (n) => [toolCall(n, "fetch_page", '{"url": "https://example.com/"}')],
      () => [text("I could not fetch the page: the connection was refused.")],
    ]),
    tools: { fetch_page },
    stopWhen: stepCountIs(10),
    prompt: "Fetch https://example.com/",
    experimental_telemetry: telemetry(),
  });
  console.log(result.text);
  await save("vercelai_tool_error");
}

async function nested() {
  const innerModel = scriptedModel("fake-inner-model", [
    (n) => [toolCall(n, "get_weather", LOOP_ARGS)],
    () => [text("18 degrees celsius in Paris.")],
  ]);
  const weather_expert = tool({
    description: "Ask the weather expert.",
    inputSchema: z.object({ question: z.string() }),
    execute: async ({ question }) => {
      const inner = await generateText({
        model: innerModel,
        tools: { get_weather },
        stopWhen: stepCountIs(10),
        prompt: question,
        experimental_telemetry: telemetry("weather_expert"),
      });
      return inner.text;
    },
  });
  const result = await generateText({
    model: scriptedModel("fake-outer-model", [
      (n) => [toolCall(n, "weather_expert", '{"question": "Weather in Paris?"}')],
      () => [text("The expert says: 18 degrees celsius in Paris.")],
    ]),
    tools: { weather_expert },
    stopWhen: stepCountIs(10),
    prompt: PROMPT,
    experimental_telemetry: telemetry(),
  });
  console.log(result.text);
  await save("vercelai_nested");
}

async function stream() {
  const result = streamText({
    model: scriptedModel("fake-loop-model", loopScript),
    tools: { get_weather },
    stopWhen: stepCountIs(10),
    prompt: PROMPT,
    experimental_telemetry: telemetry(),
  });
  for await (const _part of result.fullStream) {
    // consume every part
  }
  console.log(await result.text);
  await save("vercelai_stream");
}

async function agent() {
  const weatherAgent = new ToolLoopAgent({
    id: "weather_agent",
    model: scriptedModel("fake-loop-model", loopScript),
    instructions: "You are a weather assistant.",
    tools: { get_weather },
    stopWhen: stepCountIs(10),
    experimental_telemetry: telemetry(),
  });
  const result = await weatherAgent.generate({ prompt: PROMPT });
  console.log(result.text);
  await save("vercelai_agent");
}

async function stepLimit() {
  const result = await generateText({
    model: scriptedModel("fake-loop-model", [(n) => [toolCall(n, "get_weather", LOOP_ARGS)]]),
    tools: { get_weather },
    stopWhen: stepCountIs(2),
    prompt: PROMPT,
    experimental_telemetry: telemetry(),
  });
  console.log(`stopped after ${result.steps.length} steps, finishReason=${result.finishReason}`);
  await save("vercelai_step_limit");
}

await loop();
await toolError();
await nested();
await stream();
await agent();
await stepLimit();
await provider.shutdown();
