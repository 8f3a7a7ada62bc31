// OpenAI Agents SDK (JS) + @arizeai/openinference-instrumentation-openai-agents, model = fake OpenAI server.
// usage: node agent.cjs SCENARIO ENCODING [responses|chat]
// scenario: loop | handoff | astool | error_caught | error_fatal | maxturns
const { setup } = require('../otel_setup.cjs');
const [scenario, enc, apiKind = 'responses'] = process.argv.slice(2);
const name = `oa_${scenario}_${enc}${apiKind === 'chat' ? '_chat' : ''}`;
const { provider } = setup(name, enc, 'oa-service');

const agents = require('@openai/agents');
const { OpenAIAgentsInstrumentation } = require('@arizeai/openinference-instrumentation-openai-agents');
new OpenAIAgentsInstrumentation({ tracerProvider: provider }).manuallyInstrument(agents);
const { Agent, run, tool, setDefaultOpenAIClient, setOpenAIAPI, setTracingDisabled } = agents;
const OpenAI = require('openai').default || require('openai');
const { z } = require('zod');
setDefaultOpenAIClient(new OpenAI({ apiKey: 'sk-fake', baseURL: 'http://127.0.0.1:18990/v1', maxRetries: 0 }));
setOpenAIAPI(apiKind === 'chat' ? 'chat_completions' : 'responses');
setTracingDisabled(false);

const nonce = Math.random().toString(36).slice(2);
const S = (script) => `You are a test agent ${nonce}. <<SCRIPT:${JSON.stringify(script)}>>`;
const search = tool({ name: 'search', description: 'web search', parameters: z.object({ q: z.string() }), execute: async ({ q }) => `results for ${q}` });
const getTime = tool({ name: 'get_time', description: 'time', parameters: z.object({}), execute: async () => '12:00' });
const failCaught = tool({ name: 'fail_tool', description: 'fails', parameters: z.object({ x: z.number() }), execute: async ({ x }) => { throw new Error(`fail_tool exploded on ${x}`); } });
const failFatal = tool({ name: 'fail_tool', description: 'fails', parameters: z.object({ x: z.number() }), errorFunction: null, execute: async ({ x }) => { throw new Error(`fail_tool exploded on ${x}`); } });
const model = 'gpt-4o-mini';

async function main() {
  let result;
  try {
    if (scenario === 'loop') {
      const a = new Agent({ name: 'looper', model, tools: [search, getTime], instructions: S([
        { calls: [{ name: 'search', args: { q: 'weather in Paris' } }] }, { calls: [{ name: 'search', args: { q: 'weather in Paris' } }] },
        { calls: [{ name: 'search', args: { q: 'weather in Paris' } }] }, { calls: [{ name: 'get_time', args: {} }] }, { text: 'It is sunny.' }]) });
      result = await run(a, 'weather?');
    } else if (scenario === 'handoff') {
      const specialist = new Agent({ name: 'specialist', model, tools: [search], instructions: S([{ calls: [{ name: 'search', args: { q: 'special' } }] }, { text: 'specialist answer' }]) });
      const triage = new Agent({ name: 'triage', model, handoffs: [specialist], instructions: S([{ calls: [{ name: 'transfer_to_specialist', args: {} }] }]) });
      result = await run(triage, 'help me');
    } else if (scenario === 'astool') {
      const helper = new Agent({ name: 'helper', model, tools: [search], instructions: S([{ calls: [{ name: 'search', args: { q: 'helper q' } }] }, { text: 'helper answer' }]) });
      const manager = new Agent({ name: 'manager', model, tools: [helper.asTool({ toolName: 'ask_helper', toolDescription: 'ask the helper' })],
        instructions: S([{ calls: [{ name: 'ask_helper', args: { input: 'what is x?' } }] }, { text: 'manager answer' }]) });
      result = await run(manager, 'go');
    } else if (scenario === 'error_caught') {
      const a = new Agent({ name: 'errcaught', model, tools: [failCaught], instructions: S([{ calls: [{ name: 'fail_tool', args: { x: 1 } }] }, { text: 'tool failed, sorry' }]) });
      result = await run(a, 'x');
    } else if (scenario === 'error_fatal') {
      const a = new Agent({ name: 'errfatal', model, tools: [failFatal], instructions: S([{ calls: [{ name: 'fail_tool', args: { x: 2 } }] }, { text: 'unreachable' }]) });
      result = await run(a, 'x');
    } else if (scenario === 'maxturns') {
      const a = new Agent({ name: 'limited', model, tools: [search], instructions: S([{ calls: [{ name: 'search', args: { q: 'again' } }], repeat: true }]) });
      result = await run(a, 'x', { maxTurns: 3 });
    }
    console.log('final:', JSON.stringify(result.finalOutput));
  } catch (e) { console.log('raised:', e.constructor.name, String(e.message).slice(0, 150)); }
  await new Promise((r) => setTimeout(r, 500));
  await agents.getGlobalTraceProvider?.().forceFlush?.();
  await provider.forceFlush();
  await provider.shutdown();
}
main().catch((e) => { console.error(e); process.exit(1); });
