// Strands Agents TypeScript SDK, its built-in OpenTelemetry tracing (global provider), fake OpenAI server.
// usage: node agent.cjs <scenario> <json|proto>   (set OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental for the latest dialect)
const { setup } = require('../../js/otel_setup.cjs');
const scenario = process.argv[2] || 'loop';
const enc = process.argv[3] || 'json';
const dialect = (process.env.OTEL_SEMCONV_STABILITY_OPT_IN || '').includes('latest') ? 'latest' : 'default';
const name = `strandsjs_${dialect}_${scenario}_${enc}`;
const { provider } = setup(name, enc);
const { Agent, tool } = require('@strands-agents/sdk');
const { OpenAIModel } = require('@strands-agents/sdk/models/openai');
const { z } = require('zod');
const tag = Date.now();
const S = (arr) => `You are an agent. <<SCRIPT:${JSON.stringify(arr)}>> tag=${tag}`;
const mk = () => new OpenAIModel({ api: 'chat', modelId: 'gpt-4o-mini', apiKey: 'sk-fake', clientConfig: { baseURL: 'http://127.0.0.1:18990/v1' } });
const search = tool({ name: 'search', description: 'search the web', inputSchema: z.object({ q: z.string(), n: z.number().optional() }), callback: async ({ q }) => `results for ${q}` });
const boom = tool({ name: 'boom', description: 'always fails', inputSchema: z.object({ x: z.number() }), callback: async ({ x }) => { throw new Error(`boom failed on ${x}`); } });

async function main() {
  let out;
  try {
    if (scenario === 'loop') {
      const a = new Agent({ name: 'researcher', model: mk(), tools: [search], printer: false, systemPrompt: S([{ calls: [{ name: 'search', args: { q: 'keelwave', n: 3 } }] }, { calls: [{ name: 'search', args: { q: 'keelwave', n: 3 } }] }, { calls: [{ name: 'search', args: { q: 'keelwave', n: 3 } }] }, { text: 'final: keelwave is a tool' }]) });
      out = String((await a.invoke('what is keelwave?')));
    } else if (scenario === 'error') {
      const a = new Agent({ name: 'failer', model: mk(), tools: [search, boom], printer: false, systemPrompt: S([{ calls: [{ name: 'search', args: { q: 'a' } }] }, { calls: [{ name: 'boom', args: { x: 7 } }] }, { text: 'never' }]) });
      out = String(await a.invoke('please fail'));
    } else if (scenario === 'nested') {
      const helperTool = tool({ name: 'helper', description: 'helper agent', inputSchema: z.object({ task: z.string() }), callback: async ({ task }) => {
        const h = new Agent({ name: 'helper', model: mk(), tools: [search], printer: false, systemPrompt: S([{ calls: [{ name: 'search', args: { q: 'sub' } }] }, { text: 'helper answer' }]) });
        return String(await h.invoke(task));
      } });
      const a = new Agent({ name: 'coordinator', model: mk(), tools: [helperTool], printer: false, systemPrompt: S([{ calls: [{ name: 'helper', args: { task: 'find' } }] }, { text: 'coordinator done' }]) });
      out = String(await a.invoke('coordinate'));
    } else if (scenario === 'swarm' || scenario === 'swarm_limit') {
      const { Swarm } = require('@strands-agents/sdk/multiagent');
      const SO = 'strands_structured_output';
      const triage = new Agent({ id: 'triage', name: 'triage', description: 'routes questions', model: mk(), tools: [search], printer: false, systemPrompt: S([{ calls: [{ name: 'search', args: { q: 'route' } }] }, { calls: [{ name: SO, args: { agentId: 'billing', message: 'help with invoice' } }] }]) });
      const billing = new Agent({ id: 'billing', name: 'billing', description: 'billing questions', model: mk(), tools: [search], printer: false, systemPrompt: S([{ calls: [{ name: 'search', args: { q: 'invoice' } }] }, { calls: [{ name: SO, args: { message: 'billing done' } }] }]) });
      const sw = new Swarm({ nodes: [triage, billing], start: 'triage', maxSteps: scenario === 'swarm_limit' ? 1 : 5 });
      const r = await sw.invoke('I have an invoice question');
      out = JSON.stringify({ status: r.status, text: String(r) }).slice(0, 300);
    } else if (scenario === 'modelerror' || scenario === 'overflow') {
      const e = scenario === 'overflow' ? { error: "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.", code: 'context_length_exceeded', status: 400 } : { error: 'bad request from upstream', code: 'invalid_request', status: 400 };
      const a = new Agent({ name: scenario, model: mk(), tools: [search], printer: false, systemPrompt: S([{ calls: [{ name: 'search', args: { q: 'x' } }] }, e]) });
      out = String(await a.invoke('go'));
    } else if (scenario === 'length') {
      const a = new Agent({ name: 'cutoff', model: mk(), tools: [search], printer: false, systemPrompt: S([{ calls: [{ name: 'search', args: { q: 'x' } }] }, { text: 'partial ans', finish: 'length' }]) });
      out = String(await a.invoke('write a lot'));
    }
  } catch (e) { out = 'raised: ' + e.constructor.name + ': ' + e.message; }
  console.log('OUT', out);
  await provider.forceFlush();
  await new Promise((r) => setTimeout(r, 500));
  await provider.shutdown();
}
main().catch((e) => { console.error(e); process.exit(1); });
