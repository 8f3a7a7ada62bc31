// Hand-written agent loop over the OpenAI JS client (fake server), instrumented with
// @arizeai/openinference-instrumentation-openai; one agent span around the loop (GenAI invoke_agent).
// usage: node agent.cjs SCENARIO ENCODING
// scenario: loop_toolspans | loop_notoolspans | nested | error | maxsteps | context | stream | responses_loop
const { setup } = require('../otel_setup.cjs');
const [scenario, enc] = process.argv.slice(2);
const name = `oi_${scenario}_${enc}${process.env.WITH_CALL_ID ? '_callid' : ''}`;
const { provider, api } = setup(name, enc, 'oi-service');
const { OpenAIInstrumentation } = require('@arizeai/openinference-instrumentation-openai');
const { registerInstrumentations } = require('@opentelemetry/instrumentation');
registerInstrumentations({ instrumentations: [new OpenAIInstrumentation()] });
const OpenAI = require('openai').default || require('openai');
const client = new OpenAI({ apiKey: 'sk-fake', baseURL: 'http://127.0.0.1:18990/v1', maxRetries: 0 });
const tracer = api.trace.getTracer('my-agent');

const nonce = Math.random().toString(36).slice(2);
const S = (script) => `You are a test agent ${nonce}-${Math.random()}. <<SCRIPT:${JSON.stringify(script)}>>`;
const TOOLS = {
  search: async ({ q }) => `results for ${q}`,
  get_time: async () => '12:00',
  fail_tool: async ({ x }) => { throw new Error(`fail_tool exploded on ${x}`); },
};
const toolDefs = [
  { type: 'function', function: { name: 'search', parameters: { type: 'object', properties: { q: { type: 'string' } } } } },
  { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: {} } } },
  { type: 'function', function: { name: 'fail_tool', parameters: { type: 'object', properties: { x: { type: 'number' } } } } },
  { type: 'function', function: { name: 'ask_helper', parameters: { type: 'object', properties: { question: { type: 'string' } } } } },
];

async function runTool(name, argsJson, toolSpans, callId) {
  const exec = async () => {
    if (name === 'ask_helper') return await agentLoop('helper', S([{ calls: [{ name: 'search', args: { q: 'helper q' } }] }, { text: 'helper answer' }]), JSON.parse(argsJson).question, { toolSpans });
    return await TOOLS[name](JSON.parse(argsJson));
  };
  if (!toolSpans) return await exec();
  return tracer.startActiveSpan(`execute_tool ${name}`, { attributes: { 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': name, 'gen_ai.tool.call.arguments': argsJson, ...(callId && process.env.WITH_CALL_ID ? { 'gen_ai.tool.call.id': callId } : {}) } }, async (span) => {
    try {
      const out = await exec();
      span.setAttribute('gen_ai.tool.call.result', String(out));
      return out;
    } catch (e) {
      span.recordException(e); span.setStatus({ code: api.SpanStatusCode.ERROR, message: e.message }); throw e;
    } finally { span.end(); }
  });
}

async function agentLoop(agentName, system, userMsg, { toolSpans = true, maxSteps = 10, stream = false, catchToolErrors = false } = {}) {
  return tracer.startActiveSpan(`invoke_agent ${agentName}`, { attributes: { 'gen_ai.operation.name': 'invoke_agent', 'gen_ai.agent.name': agentName } }, async (span) => {
    try {
      const messages = [{ role: 'system', content: system }, { role: 'user', content: userMsg }];
      for (let i = 0; ; i++) {
        if (i >= maxSteps) throw new Error(`Agent stopped: max steps (${maxSteps}) reached`);
        let msg, finish;
        if (stream) {
          const s = await client.chat.completions.create({ model: 'gpt-4o-mini', messages, tools: toolDefs, stream: true, stream_options: { include_usage: true } });
          msg = { role: 'assistant', content: '', tool_calls: [] };
          for await (const ch of s) {
            const d = ch.choices?.[0]?.delta; if (ch.choices?.[0]?.finish_reason) finish = ch.choices[0].finish_reason;
            if (d?.content) msg.content += d.content;
            if (d?.tool_calls) for (const tc of d.tool_calls) msg.tool_calls[tc.index] = { id: tc.id, type: 'function', function: { name: tc.function.name, arguments: tc.function.arguments } };
          }
          if (!msg.tool_calls.length) delete msg.tool_calls;
        } else {
          const r = await client.chat.completions.create({ model: 'gpt-4o-mini', messages, tools: toolDefs });
          msg = r.choices[0].message; finish = r.choices[0].finish_reason;
        }
        messages.push(msg);
        if (!msg.tool_calls || !msg.tool_calls.length) { span.setAttribute('output.value', msg.content || ''); return msg.content; }
        for (const tc of msg.tool_calls) {
          let out;
          try { out = await runTool(tc.function.name, tc.function.arguments, toolSpans, tc.id); }
          catch (e) { if (!catchToolErrors) throw e; out = `error: ${e.message}`; }
          messages.push({ role: 'tool', tool_call_id: tc.id, content: String(out) });
        }
      }
    } catch (e) {
      span.recordException(e); span.setStatus({ code: api.SpanStatusCode.ERROR, message: e.message }); throw e;
    } finally { span.end(); }
  });
}

async function responsesLoop(agentName, system) {
  return tracer.startActiveSpan(`invoke_agent ${agentName}`, { attributes: { 'gen_ai.operation.name': 'invoke_agent', 'gen_ai.agent.name': agentName } }, async (span) => {
    const input = [{ role: 'user', content: 'weather?' }];
    const tools = [{ type: 'function', name: 'search', parameters: { type: 'object', properties: { q: { type: 'string' } } } }];
    try {
      for (;;) {
        const r = await client.responses.create({ model: 'gpt-4o-mini', instructions: system, input, tools });
        const calls = r.output.filter((o) => o.type === 'function_call');
        if (!calls.length) return r.output_text;
        for (const c of calls) {
          input.push(c);
          const out = await runTool(c.name, c.arguments, false);
          input.push({ type: 'function_call_output', call_id: c.call_id, output: out });
        }
      }
    } finally { span.end(); }
  });
}

const LOOP = [{ calls: [{ name: 'search', args: { q: 'weather in Paris' } }] }, { calls: [{ name: 'search', args: { q: 'weather in Paris' } }] },
  { calls: [{ name: 'search', args: { q: 'weather in Paris' } }] }, { calls: [{ name: 'get_time', args: {} }] }, { text: 'It is sunny.' }];

async function main() {
  try {
    let out;
    if (scenario === 'loop_toolspans') out = await agentLoop('looper', S(LOOP), 'weather?');
    else if (scenario === 'loop_notoolspans') out = await agentLoop('looper', S(LOOP), 'weather?', { toolSpans: false });
    else if (scenario === 'stream') out = await agentLoop('streamer', S(LOOP), 'weather?', { stream: true });
    else if (scenario === 'nested') out = await agentLoop('manager', S([{ calls: [{ name: 'ask_helper', args: { question: 'what is x?' } }] }, { text: 'manager answer' }]), 'go');
    else if (scenario === 'error') out = await agentLoop('errfatal', S([{ calls: [{ name: 'get_time', args: {} }] }, { calls: [{ name: 'fail_tool', args: { x: 2 } }] }, { text: 'unreachable' }]), 'x');
    else if (scenario === 'error_caught') out = await agentLoop('errcaught', S([{ calls: [{ name: 'fail_tool', args: { x: 1 } }] }, { text: 'sorry' }]), 'x', { catchToolErrors: true });
    else if (scenario === 'maxsteps') out = await agentLoop('limited', S([{ calls: [{ name: 'search', args: { q: 'again' } }], repeat: true }]), 'x', { maxSteps: 3 });
    else if (scenario === 'context') out = await agentLoop('cutoff', S([{ calls: [{ name: 'search', args: { q: 'a' } }] }, { text: 'truncated answ', finish: 'length' }]), 'x');
    else if (scenario === 'responses_loop') out = await responsesLoop('resp_looper', S(LOOP.slice(0, 3).concat([{ text: 'ok' }])));
    else if (scenario === 'parallel') out = await agentLoop('parallel', S([{ calls: [{ name: 'search', args: { q: 'a' } }, { name: 'search', args: { q: 'b' } }, { name: 'search', args: { q: 'a' } }] }, { text: 'done' }]), 'x');
    console.log('final:', JSON.stringify(out));
  } catch (e) { console.log('raised:', e.message); }
  await provider.forceFlush();
  await provider.shutdown();
}
main().catch((e) => { console.error(e); process.exit(1); });
