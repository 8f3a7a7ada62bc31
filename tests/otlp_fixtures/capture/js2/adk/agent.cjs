// Google ADK TS scenarios with an in-process scripted fake model. usage: node agent.cjs <scenario> <json|proto>
const { setup } = require('../../js/otel_setup.cjs');
const scenario = process.argv[2] || 'loop';
const enc = process.argv[3] || 'json';
const name = `adkjs_${scenario}_${enc}`;
const { provider } = setup(name, enc);
const adk = require('@google/adk');
const { LlmAgent, FunctionTool, InMemoryRunner, BaseLlm, AgentTool } = adk;
const { z } = require('zod');

const STATE = {};
class FakeLlm extends BaseLlm {
  constructor() { super({ model: 'gemini-2.5-flash' }); }
  async *generateContentAsync(req) {
    const si = req.config && req.config.systemInstruction;
    const sys = typeof si === 'string' ? si : JSON.stringify(si || '');
    const m = sys.match(/<<SCRIPT:(\[.*?\])>>/s);
    const script = m ? JSON.parse(m[1].replace(/\\"/g, '"')) : [{ text: 'done' }];
    const key = (m && m[1]) || 'none';
    const turn = STATE[key] || 0; STATE[key] = turn + 1;
    let e = turn < script.length ? script[turn] : (script[script.length - 1].repeat ? script[script.length - 1] : { text: 'done' });
    const usageMetadata = { promptTokenCount: 100 + 10 * turn, candidatesTokenCount: 20 + turn, totalTokenCount: 120 + 11 * turn };
    console.error('LLM', key.slice(0, 40), 'turn', turn, JSON.stringify(e));
    if (e.raise) throw new Error(e.raise);
    if (e.calls) {
      yield { content: { role: 'model', parts: e.calls.map((c, i) => ({ functionCall: { name: c.name, args: c.args, id: `fc_${turn}_${i}_${Math.random().toString(36).slice(2, 8)}` } })) }, usageMetadata, finishReason: 'STOP' };
    } else {
      yield { content: { role: 'model', parts: [{ text: e.text }] }, usageMetadata, finishReason: e.finish || 'STOP' };
    }
  }
  async connect() { throw new Error('no live'); }
}
const llm = new FakeLlm();
const S = (arr) => `You are an agent. <<SCRIPT:${JSON.stringify(arr)}>>`;
const search = new FunctionTool({ name: 'search', description: 'search the web', parameters: z.object({ q: z.string(), n: z.number().optional() }), execute: async ({ q }) => ({ result: `results for ${q}` }) });
const boom = new FunctionTool({ name: 'boom', description: 'always fails', parameters: z.object({ x: z.number() }), execute: async ({ x }) => { throw new Error(`boom failed on ${x}`); } });

async function run(agent, text, runConfig) {
  const runner = new InMemoryRunner({ agent, appName: 'app' });
  const session = await runner.sessionService.createSession({ appName: 'app', userId: 'u' });
  let last = null;
  try {
    for await (const ev of runner.runAsync({ userId: 'u', sessionId: session.id, newMessage: { role: 'user', parts: [{ text }] }, runConfig })) {
      const parts = (ev.content && ev.content.parts) || [];
      for (const p of parts) console.log('EVENT', ev.author, JSON.stringify(p).slice(0, 160));
      if (ev.errorCode || ev.errorMessage) console.log('EVENT-ERR', ev.errorCode, ev.errorMessage);
      last = ev;
    }
  } catch (e) { console.log('RAISED', e.constructor.name, e.message); }
}

async function main() {
  const tag = Date.now();
  if (scenario === 'loop') {
    const a = new LlmAgent({ name: 'researcher', model: llm, instruction: S([{ calls: [{ name: 'search', args: { q: 'keelwave', n: 3 } }] }, { calls: [{ name: 'search', args: { q: 'keelwave', n: 3 } }] }, { calls: [{ name: 'search', args: { q: 'keelwave', n: 3 } }] }, { text: 'final: keelwave ' + tag }]), tools: [search] });
    await run(a, 'what is keelwave?');
  } else if (scenario === 'error') {
    const a = new LlmAgent({ name: 'failer', model: llm, instruction: S([{ calls: [{ name: 'search', args: { q: 'a' } }] }, { calls: [{ name: 'boom', args: { x: 7 } }] }, { text: 'never ' + tag }]), tools: [search, boom] });
    await run(a, 'please fail');
  } else if (scenario === 'maxturns') {
    const a = new LlmAgent({ name: 'limited', model: llm, instruction: S([{ calls: [{ name: 'search', args: { q: 'again' + tag } }], repeat: true }]), tools: [search] });
    await run(a, 'loop forever', { maxLlmCalls: 3 });
  } else if (scenario === 'parallel') {
    const a = new LlmAgent({ name: 'parallel', model: llm, instruction: S([{ calls: [{ name: 'search', args: { q: 'a' } }, { name: 'search', args: { q: 'b' } }, { name: 'search', args: { q: 'a' } }] }, { text: 'par done ' + tag }]), tools: [search] });
    await run(a, 'parallel');
  } else if (scenario === 'modelerror') {
    const a = new LlmAgent({ name: 'modelfail', model: llm, instruction: S([{ calls: [{ name: 'search', args: { q: 'a' } }] }, { raise: 'upstream 500 ' + tag }]), tools: [search] });
    await run(a, 'model fails');
  } else if (scenario === 'length') {
    const a = new LlmAgent({ name: 'cutoff', model: llm, instruction: S([{ calls: [{ name: 'search', args: { q: 'x' } }] }, { text: 'partial ans ' + tag, finish: 'MAX_TOKENS' }]), tools: [search] });
    await run(a, 'write a lot');
  } else if (scenario === 'nested') {
    // sub-agent reached by transfer_to_agent, and an agent used as a tool
    const helper = new LlmAgent({ name: 'helper', description: 'helps', model: llm, instruction: S([{ calls: [{ name: 'search', args: { q: 'sub' } }] }, { text: 'helper answer ' + tag }]), tools: [search] });
    const billing = new LlmAgent({ name: 'billing', description: 'billing questions', model: llm, instruction: S([{ calls: [{ name: 'search', args: { q: 'invoice' } }] }, { text: 'billing answer ' + tag }]), tools: [search] });
    const root = new LlmAgent({ name: 'coordinator', model: llm, instruction: S([{ calls: [{ name: 'helper', args: { request: 'find' } }] }, { calls: [{ name: 'transfer_to_agent', args: { agentName: 'billing' } }] }, { text: 'coordinator done ' + tag }]), tools: [new AgentTool({ agent: helper })], subAgents: [billing] });
    await run(root, 'coordinate');
  }
  await provider.forceFlush();
  await new Promise((r) => setTimeout(r, 600));
  await provider.shutdown();
}
main().catch((e) => { console.error(e); process.exit(1); });
