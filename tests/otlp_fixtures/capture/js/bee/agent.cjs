// BeeAI Framework TS (ToolCallingAgent) + @arizeai/openinference-instrumentation-beeai; OpenAIChatModel -> fake server.
// usage: node agent.cjs SCENARIO ENCODING      scenario: loop | error | maxsteps | nested
process.env.OPENAI_API_KEY = 'sk-fake';
process.env.OPENAI_API_ENDPOINT = 'http://127.0.0.1:18990/v1';
const { setup } = require('../otel_setup.cjs');
const [scenario, enc] = process.argv.slice(2);
const name = `bee_${scenario}_${enc}`;
const { provider } = setup(name, enc, 'bee-service');
const { BeeAIInstrumentation } = require('@arizeai/openinference-instrumentation-beeai');
const bee = require('beeai-framework');
const inst = new BeeAIInstrumentation();
inst.setTracerProvider(provider);
inst.manuallyInstrument(bee);
const { ToolCallingAgent } = require('beeai-framework/agents/toolCalling/agent');
const { OpenAIChatModel } = require('beeai-framework/adapters/openai/backend/chat');
const { DynamicTool, StringToolOutput } = require('beeai-framework/tools/base');
const { UnconstrainedMemory } = require('beeai-framework/memory/unconstrainedMemory');
const { z } = require('zod');

const nonce = Math.random().toString(36).slice(2);
const S = (script) => `You are a test agent ${nonce}-${Math.random()}. <<SCRIPT:${JSON.stringify(script)}>>`;
const mk = (n, schema, fn) => new DynamicTool({ name: n, description: n, inputSchema: schema, handler: async (input) => new StringToolOutput(await fn(input)) });
const search = mk('search', z.object({ q: z.string() }), async ({ q }) => `results for ${q}`);
const failTool = mk('fail_tool', z.object({ x: z.number() }), async ({ x }) => { throw new Error(`fail_tool exploded on ${x}`); });
const FINAL = (t) => ({ calls: [{ name: 'final_answer', args: { response: t } }] });

function agent(agentName, script, tools) {
  return new ToolCallingAgent({ llm: new OpenAIChatModel('gpt-4o-mini'), memory: new UnconstrainedMemory(), tools,
    meta: { name: agentName, description: agentName }, templates: { system: (t) => t.fork((c) => { c.template = S(script); }) } });
}

async function main() {
  try {
    let r;
    if (scenario === 'loop') {
      r = await agent('looper', [{ calls: [{ name: 'search', args: { q: 'weather in Paris' } }] }, { calls: [{ name: 'search', args: { q: 'weather in Paris' } }] },
        { calls: [{ name: 'search', args: { q: 'weather in Paris' } }] }, FINAL('It is sunny.')], [search]).run({ prompt: 'weather?' });
    } else if (scenario === 'error') {
      r = await agent('errfatal', [{ calls: [{ name: 'fail_tool', args: { x: 2 } }] }, FINAL('sorry')], [failTool]).run({ prompt: 'x' }, { execution: { totalMaxRetries: 0, maxRetriesPerStep: 0 } });
    } else if (scenario === 'maxsteps') {
      r = await agent('limited', [{ calls: [{ name: 'search', args: { q: 'again' } }], repeat: true }], [search]).run({ prompt: 'x' }, { execution: { maxIterations: 3 } });
    } else if (scenario === 'nested') {
      const ask = mk('ask_helper', z.object({ question: z.string() }), async ({ question }) => {
        const x = await agent('helper', [{ calls: [{ name: 'search', args: { q: 'helper q' } }] }, FINAL('helper answer')], [search]).run({ prompt: question });
        return x.result.text;
      });
      r = await agent('manager', [{ calls: [{ name: 'ask_helper', args: { question: 'what is x?' } }] }, FINAL('manager answer')], [ask]).run({ prompt: 'go' });
    }
    console.log('final:', JSON.stringify(r.result.text));
  } catch (e) { console.log('raised:', e.constructor.name, String(e.message).slice(0, 200)); }
  await provider.forceFlush();
  await provider.shutdown();
}
main().catch((e) => { console.error(e); process.exit(1); });
