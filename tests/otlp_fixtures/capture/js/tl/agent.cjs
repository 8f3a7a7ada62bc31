// OpenLLMetry JS (@traceloop/node-server-sdk) withWorkflow/withAgent/withTool + its OpenAI instrumentation;
// hand-written agent loop over the OpenAI client pointed at the fake server.
// usage: node agent.cjs SCENARIO ENCODING (json|proto)
// scenario: loop | nested | error | error_caught | maxsteps | workflow_two_agents
const [scenario, enc] = process.argv.slice(2);
const name = `tl_${scenario}_${enc}`;
const KEY = process.env.KEELWAVE_API_KEY;
const url = `http://127.0.0.1:18999/cap/${name}/v1/traces`;
const { OTLPTraceExporter } = require(enc === 'json' ? '@opentelemetry/exporter-trace-otlp-http' : '@opentelemetry/exporter-trace-otlp-proto');
const { BatchSpanProcessor } = require('@opentelemetry/sdk-trace-base');
const exporter = new OTLPTraceExporter({ url, headers: { Authorization: `Bearer ${KEY}` } });
const traceloop = require('@traceloop/node-server-sdk');
const OpenAI = require('openai').default || require('openai');
traceloop.initialize({
  appName: 'tl-service', silenceInitializationMessage: true, traceContent: true, traceloopSyncEnabled: false,
  exporter,
  instrumentModules: { openAI: OpenAI },
});
const client = new OpenAI({ apiKey: 'sk-fake', baseURL: 'http://127.0.0.1:18990/v1', maxRetries: 0 });

const nonce = Math.random().toString(36).slice(2);
const S = (script) => `You are a test agent ${nonce}-${Math.random()}. <<SCRIPT:${JSON.stringify(script)}>>`;
const toolDefs = ['search', 'get_time', 'fail_tool', 'ask_helper'].map((n) => ({ type: 'function', function: { name: n, parameters: { type: 'object', properties: {} } } }));

const IMPL = {
  search: async ({ q }) => `results for ${q}`,
  get_time: async () => '12:00',
  fail_tool: async ({ x }) => { throw new Error(`fail_tool exploded on ${x}`); },
  ask_helper: async ({ question }) => agentLoop('helper', S([{ calls: [{ name: 'search', args: { q: 'helper q' } }] }, { text: 'helper answer' }]), question),
};

async function agentLoop(agentName, system, userMsg, { maxSteps = 10, catchToolErrors = false } = {}) {
  return traceloop.withAgent({ name: agentName }, async () => {
    const messages = [{ role: 'system', content: system }, { role: 'user', content: userMsg }];
    for (let i = 0; ; i++) {
      if (i >= maxSteps) throw new Error(`Agent stopped: max steps (${maxSteps}) reached`);
      const r = await client.chat.completions.create({ model: 'gpt-4o-mini', messages, tools: toolDefs });
      const msg = r.choices[0].message;
      messages.push(msg);
      if (!msg.tool_calls?.length) return msg.content;
      for (const tc of msg.tool_calls) {
        const args = JSON.parse(tc.function.arguments);
        let out;
        try { out = await traceloop.withTool({ name: tc.function.name }, (a) => IMPL[tc.function.name](a), args); }
        catch (e) { if (!catchToolErrors) throw e; out = `error: ${e.message}`; }
        messages.push({ role: 'tool', tool_call_id: tc.id, content: String(out) });
      }
    }
  }, userMsg);
}

const LOOP = [{ calls: [{ name: 'search', args: { q: 'weather in Paris' } }] }, { calls: [{ name: 'search', args: { q: 'weather in Paris' } }] },
  { calls: [{ name: 'search', args: { q: 'weather in Paris' } }] }, { calls: [{ name: 'get_time', args: {} }] }, { text: 'It is sunny.' }];

async function main() {
  try {
    let out;
    if (scenario === 'loop') out = await agentLoop('looper', S(LOOP), 'weather?');
    else if (scenario === 'nested') out = await agentLoop('manager', S([{ calls: [{ name: 'ask_helper', args: { question: 'what is x?' } }] }, { text: 'manager answer' }]), 'go');
    else if (scenario === 'error') out = await agentLoop('errfatal', S([{ calls: [{ name: 'fail_tool', args: { x: 2 } }] }, { text: 'unreachable' }]), 'x');
    else if (scenario === 'error_caught') out = await agentLoop('errcaught', S([{ calls: [{ name: 'fail_tool', args: { x: 1 } }] }, { text: 'sorry' }]), 'x', { catchToolErrors: true });
    else if (scenario === 'maxsteps') out = await agentLoop('limited', S([{ calls: [{ name: 'search', args: { q: 'again' } }], repeat: true }]), 'x', { maxSteps: 3 });
    else if (scenario === 'workflow_two_agents') out = await traceloop.withWorkflow({ name: 'pipeline' }, async () => {
      const a = await agentLoop('first', S([{ calls: [{ name: 'search', args: { q: 'one' } }] }, { text: 'first done' }]), 'a');
      const b = await agentLoop('second', S([{ calls: [{ name: 'search', args: { q: 'two' } }] }, { text: 'second done' }]), 'b');
      return a + ' / ' + b;
    });
    console.log('final:', JSON.stringify(out));
  } catch (e) { console.log('raised:', e.message); }
  await traceloop.forceFlush();
  await new Promise((r) => setTimeout(r, 500));
}
main().catch((e) => { console.error(e); process.exit(1); });
