// Genkit JS agent scenarios against the fake OpenAI server. usage: node agent.cjs <scenario> <json|proto>
process.env.OPENAI_BASE_URL = process.env.OPENAI_BASE_URL || 'http://127.0.0.1:18990/v1';
process.env.OPENAI_API_KEY = 'sk-fake';
const { createRequire } = require('module');
const path = require('path');
const req = createRequire(path.join(process.cwd(), 'x.js'));
const scenario = process.argv[2] || 'loop';
const enc = process.argv[3] || 'json';
const name = `genkitjs_${scenario}_${enc}`;
const KEY = process.env.KEELWAVE_API_KEY;
// genkit bundles @opentelemetry/sdk-node 0.52 (SDK 1.25): use the exporters and processor of that line
const N = (m) => require('./node_modules/@opentelemetry/sdk-node/node_modules/@opentelemetry/' + m);
const { BatchSpanProcessor } = N('sdk-trace-base');
const url = `http://127.0.0.1:18999/cap/${name}/v1/traces`;
const headers = { Authorization: `Bearer ${KEY}` };
const Exp = enc === 'json' ? N('exporter-trace-otlp-http').OTLPTraceExporter : N('exporter-trace-otlp-proto').OTLPTraceExporter;
const bsp = new BatchSpanProcessor(new Exp({ url, headers }), { maxExportBatchSize: Number(process.env.BATCH || 5), scheduledDelayMillis: 200 });
const { enableTelemetry, flushTracing } = require('genkit/tracing');
const { resourceFromAttributes } = req('@opentelemetry/resources');
const { genkit, z } = require('genkit');
const { openAI } = require('@genkit-ai/compat-oai/openai');

const S = (arr) => `You are an agent. <<SCRIPT:${JSON.stringify(arr)}>> tag=${name}-${Date.now()}`;

async function main() {
  process.env.OTEL_SERVICE_NAME = name;
  await enableTelemetry({ spanProcessors: [bsp] });
  const ai = genkit({ plugins: [openAI()] });
  const model = openAI.model('gpt-4o-mini');
  const search = ai.defineTool({ name: 'search', description: 'search the web', inputSchema: z.object({ q: z.string(), n: z.number().optional() }), outputSchema: z.string() },
    async (input) => `results for ${input.q}`);
  const boom = ai.defineTool({ name: 'boom', description: 'always fails', inputSchema: z.object({ x: z.number() }), outputSchema: z.string() },
    async (input) => { throw new Error(`boom failed on ${input.x}`); });
  let out;
  if (scenario === 'loop') {
    const flow = ai.defineFlow('researcher', async (q) => {
      const r = await ai.generate({ model, system: S([{ calls: [{ name: 'search', args: { q: 'keelwave', n: 3 } }] }, { calls: [{ name: 'search', args: { q: 'keelwave', n: 3 } }] }, { calls: [{ name: 'search', args: { q: 'keelwave', n: 3 } }] }, { text: 'final: keelwave is a tool' }]), prompt: q, tools: [search] });
      return r.text;
    });
    out = await flow('what is keelwave?');
  } else if (scenario === 'error') {
    const flow = ai.defineFlow('failer', async (q) => {
      const r = await ai.generate({ model, system: S([{ calls: [{ name: 'search', args: { q: 'a' } }] }, { calls: [{ name: 'boom', args: { x: 7 } }] }, { text: 'never' }]), prompt: q, tools: [search, boom] });
      return r.text;
    });
    try { out = await flow('please fail'); } catch (e) { out = 'raised: ' + e.message; }
  } else if (scenario === 'maxturns') {
    const flow = ai.defineFlow('limited', async (q) => {
      const r = await ai.generate({ model, system: S([{ calls: [{ name: 'search', args: { q: 'again' } }], repeat: true }]), prompt: q, tools: [search], maxTurns: 2 });
      return r.text;
    });
    try { out = await flow('loop forever'); } catch (e) { out = 'raised: ' + e.message; }
  } else if (scenario === 'nested') {
    // sub-agent as a tool: a tool that runs its own generate (and a prompt used as a tool)
    const helperFlow = ai.defineFlow('helper', async (task) => (await ai.generate({ model, system: S([{ calls: [{ name: 'search', args: { q: 'sub' } }] }, { text: 'helper answer' }]), prompt: task, tools: [search] })).text);
    const helper = ai.defineTool({ name: 'helperAgent', description: 'a helper agent', inputSchema: z.object({ task: z.string() }), outputSchema: z.string() }, async ({ task }) => helperFlow(task));
    const flow = ai.defineFlow('coordinator', async (q) => {
      const r = await ai.generate({ model, system: S([{ calls: [{ name: 'helperAgent', args: { task: 'find' } }] }, { text: 'coordinator done' }]), prompt: q, tools: [helper] });
      return r.text;
    });
    out = await flow('coordinate');
  }
  console.log('OUT', out);
  await flushTracing();
  await bsp.forceFlush();
  await new Promise((r) => setTimeout(r, 500));
  process.exit(0);
}
main().catch((e) => { console.error(e); process.exit(1); });
