// VoltAgent scenarios against the fake OpenAI server. usage: node agent.cjs <scenario> <json|proto>
const { createRequire } = require('module');
const path = require('path');
const req = createRequire(path.join(process.cwd(), 'x.js'));
const scenario = process.argv[2] || 'loop';
const enc = process.argv[3] || 'json';
const name = `voltagent_${scenario}_${enc}`;
const KEY = process.env.KEELWAVE_API_KEY;
const { BatchSpanProcessor } = req('@opentelemetry/sdk-trace-base');
const url = `http://127.0.0.1:18999/cap/${name}/v1/traces`;
const Exp = enc === 'json' ? req('@opentelemetry/exporter-trace-otlp-http').OTLPTraceExporter : req('@opentelemetry/exporter-trace-otlp-proto').OTLPTraceExporter;
const bsp = new BatchSpanProcessor(new Exp({ url, headers: { Authorization: `Bearer ${KEY}` } }), { maxExportBatchSize: Number(process.env.BATCH || 5), scheduledDelayMillis: 200 });
const { Agent, createTool, VoltAgentObservability } = require('@voltagent/core');
const { createOpenAI } = require('@ai-sdk/openai');
const { z } = require('zod');
const openai = createOpenAI({ baseURL: 'http://127.0.0.1:18990/v1', apiKey: 'sk-fake' });
const model = openai.chat('gpt-4o-mini');
const observability = new VoltAgentObservability({ serviceName: name, spanProcessors: [bsp] });
const tag = Date.now();
const S = (arr) => `You are an agent. <<SCRIPT:${JSON.stringify(arr)}>> tag=${tag}`;
const search = createTool({ name: 'search', description: 'search the web', parameters: z.object({ q: z.string(), n: z.number().optional() }), execute: async ({ q }) => `results for ${q}` });
const boom = createTool({ name: 'boom', description: 'always fails', parameters: z.object({ x: z.number() }), execute: async ({ x }) => { throw new Error(`boom failed on ${x}`); } });

async function main() {
  let out;
  try {
    if (scenario === 'loop') {
      const a = new Agent({ name: 'researcher', instructions: S([{ calls: [{ name: 'search', args: { q: 'keelwave', n: 3 } }] }, { calls: [{ name: 'search', args: { q: 'keelwave', n: 3 } }] }, { calls: [{ name: 'search', args: { q: 'keelwave', n: 3 } }] }, { text: 'final: keelwave is a tool' }]), model, tools: [search], observability });
      out = (await a.generateText('what is keelwave?')).text;
    } else if (scenario === 'error') {
      const a = new Agent({ name: 'failer', instructions: S([{ calls: [{ name: 'search', args: { q: 'a' } }] }, { calls: [{ name: 'boom', args: { x: 7 } }] }, { text: 'never' }]), model, tools: [search, boom], observability });
      out = (await a.generateText('please fail')).text;
    } else if (scenario === 'maxturns') {
      const a = new Agent({ name: 'limited', instructions: S([{ calls: [{ name: 'search', args: { q: 'again' } }], repeat: true }]), model, tools: [search], maxSteps: 3, observability });
      out = (await a.generateText('loop forever')).text;
    } else if (scenario === 'nested') {
      const helper = new Agent({ name: 'helper', purpose: 'helps with search', instructions: S([{ calls: [{ name: 'search', args: { q: 'sub' } }] }, { text: 'helper answer' }]), model, tools: [search], observability });
      const sup = new Agent({ name: 'supervisor', instructions: S([{ calls: [{ name: 'delegate_task', args: { task: 'find things', targetAgents: ['helper'] } }] }, { text: 'supervisor done' }]), model, subAgents: [helper], observability });
      out = (await sup.generateText('coordinate')).text;
    } else if (scenario === 'length') {
      const a = new Agent({ name: 'cutoff', instructions: S([{ text: 'partial ans', finish: 'length' }]), model, observability });
      out = (await a.generateText('write a lot')).text;
    }
  } catch (e) { out = 'raised: ' + (e && e.message); }
  console.log('OUT', out);
  await new Promise((r) => setTimeout(r, 500));
  await observability.forceFlush?.();
  await bsp.forceFlush();
  await new Promise((r) => setTimeout(r, 500));
  process.exit(0);
}
main().catch((e) => { console.error(e); process.exit(1); });
