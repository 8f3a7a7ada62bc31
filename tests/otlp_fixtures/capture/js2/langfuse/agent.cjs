// An agent loop of one's own traced with Langfuse's JS SDK v5 (OpenTelemetry-based): agent/tool observations
// by startActiveObservation, model calls by @langfuse/openai's observeOpenAI. usage: node agent.cjs <scenario> <json|proto>
const { setup } = require('../../js/otel_setup.cjs');
const scenario = process.argv[2] || 'loop';
const enc = process.argv[3] || 'json';
const name = `langfusejs_${scenario}_${enc}`;
const { provider } = setup(name, enc);
const { startActiveObservation } = require('@langfuse/tracing');
const { observeOpenAI } = require('@langfuse/openai');
const OpenAI = require('openai').default || require('openai');
const tag = Date.now();
const S = (arr) => `You are an agent. <<SCRIPT:${JSON.stringify(arr)}>> tag=${tag}`;
const TOOLS = {
  search: async ({ q }) => `results for ${q}`,
  boom: async ({ x }) => { throw new Error(`boom failed on ${x}`); },
};
const toolDefs = (names) => names.map((n) => ({ type: 'function', function: { name: n, description: n, parameters: { type: 'object', properties: {}, additionalProperties: true } } }));

async function runAgent(agentName, system, toolNames, userMsg, maxSteps = 10) {
  return startActiveObservation(agentName, async (agentObs) => {
    agentObs.update({ input: userMsg });
    const client = observeOpenAI(new OpenAI({ baseURL: 'http://127.0.0.1:18990/v1', apiKey: 'sk-fake' }), { generationName: 'chat' });
    const messages = [{ role: 'system', content: system }, { role: 'user', content: userMsg }];
    for (let i = 0; i < maxSteps; i++) {
      const r = await client.chat.completions.create({ model: 'gpt-4o-mini', messages, tools: toolDefs(toolNames) });
      const msg = r.choices[0].message;
      messages.push(msg);
      if (!msg.tool_calls || !msg.tool_calls.length) { agentObs.update({ output: msg.content }); return msg.content; }
      for (const tc of msg.tool_calls) {
        const args = tc.function.arguments;
        const result = await startActiveObservation(tc.function.name, async (toolObs) => {
          toolObs.update({ input: JSON.parse(args) });
          const fn = TOOLS[tc.function.name];
          try {
            const out = await fn(JSON.parse(args));
            toolObs.update({ output: out });
            return out;
          } catch (e) {
            toolObs.update({ level: 'ERROR', statusMessage: e.message });
            throw e;
          }
        }, { asType: 'tool' });
        messages.push({ role: 'tool', tool_call_id: tc.id, content: String(result) });
      }
    }
    const err = new Error(`Max steps (${maxSteps}) reached`);
    agentObs.update({ level: 'ERROR', statusMessage: err.message });
    throw err;
  }, { asType: 'agent' });
}
TOOLS.helper = async ({ task }) => runAgent('helper', S([{ calls: [{ name: 'search', args: { q: 'sub' } }] }, { text: 'helper answer' }]), ['search'], task);

async function main() {
  let out;
  try {
    if (scenario === 'loop') out = await runAgent('researcher', S([{ calls: [{ name: 'search', args: { q: 'keelwave', n: 3 } }] }, { calls: [{ name: 'search', args: { q: 'keelwave', n: 3 } }] }, { calls: [{ name: 'search', args: { q: 'keelwave', n: 3 } }] }, { text: 'final: keelwave is a tool' }]), ['search'], 'what is keelwave?');
    else if (scenario === 'error') out = await runAgent('failer', S([{ calls: [{ name: 'search', args: { q: 'a' } }] }, { calls: [{ name: 'boom', args: { x: 7 } }] }, { text: 'never' }]), ['search', 'boom'], 'please fail');
    else if (scenario === 'maxturns') out = await runAgent('limited', S([{ calls: [{ name: 'search', args: { q: 'again' } }], repeat: true }]), ['search'], 'loop forever', 3);
    else if (scenario === 'nested') out = await runAgent('coordinator', S([{ calls: [{ name: 'helper', args: { task: 'find' } }] }, { text: 'coordinator done' }]), ['helper'], 'coordinate');
  } catch (e) { out = 'raised: ' + e.message; }
  console.log('OUT', out);
  await provider.forceFlush();
  await new Promise((r) => setTimeout(r, 500));
  await provider.shutdown();
}
main().catch((e) => { console.error(e); process.exit(1); });
