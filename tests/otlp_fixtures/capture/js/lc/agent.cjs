// LangGraph.js createReactAgent + ChatOpenAI (fake OpenAI server) + OpenInference LangChain instrumentation.
// usage: node agent.cjs SCENARIO ENCODING      (scenario: loop|nested|error_caught|error_fatal|maxsteps; encoding json|proto|grpc)
const { setup } = require('../otel_setup.cjs');
const [scenario, enc] = process.argv.slice(2);
const name = `lg_${scenario}_${enc}`;
const { provider } = setup(name, enc, 'lg-service');

const { LangChainInstrumentation } = require('@arizeai/openinference-instrumentation-langchain');
const CallbackManagerModule = require('@langchain/core/callbacks/manager');
new LangChainInstrumentation().manuallyInstrument(CallbackManagerModule);

require('@langchain/langgraph'); // initialises LangChain's AsyncLocalStorage (context into nested graphs)
const { createReactAgent, ToolNode } = require('@langchain/langgraph/prebuilt');
const { ChatOpenAI } = require('@langchain/openai');
const { tool } = require('@langchain/core/tools');
const { z } = require('zod');

const nonce = Math.random().toString(36).slice(2);
const S = (script) => `You are a test agent ${nonce}. <<SCRIPT:${JSON.stringify(script)}>>`;
const llm = () => new ChatOpenAI({ model: 'gpt-4o-mini', apiKey: 'sk-fake', configuration: { baseURL: 'http://127.0.0.1:18990/v1' }, maxRetries: 0 });

const search = tool(async ({ q }) => `results for ${q}`, { name: 'search', description: 'web search', schema: z.object({ q: z.string() }) });
const getTime = tool(async () => '12:00', { name: 'get_time', description: 'time', schema: z.object({}) });
const failTool = tool(async ({ x }) => { throw new Error(`fail_tool exploded on ${x}`); }, { name: 'fail_tool', description: 'fails', schema: z.object({ x: z.number() }) });

async function main() {
  let result;
  if (scenario === 'loop') {
    const agent = createReactAgent({ llm: llm(), tools: [search, getTime], name: 'looper',
      prompt: S([{ calls: [{ name: 'search', args: { q: 'weather in Paris' } }] }, { calls: [{ name: 'search', args: { q: 'weather in Paris' } }] },
        { calls: [{ name: 'search', args: { q: 'weather in Paris' } }] }, { calls: [{ name: 'get_time', args: {} }] }, { text: 'It is sunny.' }]) });
    result = await agent.invoke({ messages: [{ role: 'user', content: 'weather?' }] });
  } else if (scenario === 'nested') {
    const researcher = createReactAgent({ llm: llm(), tools: [search], name: 'researcher',
      prompt: S([{ calls: [{ name: 'search', args: { q: 'inner question' } }] }, { text: 'inner answer' }]) });
    const ask = tool(async ({ question }) => {
      const r = await researcher.invoke({ messages: [{ role: 'user', content: question }] });
      return r.messages[r.messages.length - 1].content;
    }, { name: 'ask_researcher', description: 'ask', schema: z.object({ question: z.string() }) });
    const sup = createReactAgent({ llm: llm(), tools: [ask], name: 'supervisor',
      prompt: S([{ calls: [{ name: 'ask_researcher', args: { question: 'what is up?' } }] }, { text: 'final from supervisor' }]) });
    result = await sup.invoke({ messages: [{ role: 'user', content: 'go' }] });
  } else if (scenario === 'error_caught') {
    const agent = createReactAgent({ llm: llm(), tools: [failTool], name: 'errcaught',
      prompt: S([{ calls: [{ name: 'fail_tool', args: { x: 1 } }] }, { text: 'tool failed, sorry' }]) });
    result = await agent.invoke({ messages: [{ role: 'user', content: 'x' }] });
  } else if (scenario === 'error_fatal') {
    const agent = createReactAgent({ llm: llm(), tools: new ToolNode([failTool], { handleToolErrors: false }), name: 'errfatal',
      prompt: S([{ calls: [{ name: 'fail_tool', args: { x: 2 } }] }, { text: 'unreachable' }]) });
    try { result = await agent.invoke({ messages: [{ role: 'user', content: 'x' }] }); } catch (e) { console.log('raised:', e.name, e.message); }
  } else if (scenario === 'maxsteps') {
    const agent = createReactAgent({ llm: llm(), tools: [search], name: 'limited',
      prompt: S([{ calls: [{ name: 'search', args: { q: 'again' } }], repeat: true }]) });
    try { result = await agent.invoke({ messages: [{ role: 'user', content: 'x' }] }, { recursionLimit: 7 }); } catch (e) { console.log('raised:', e.name, e.message.slice(0, 120)); }
  }
  if (result) console.log('final:', JSON.stringify(result.messages[result.messages.length - 1].content));
  await provider.forceFlush();
  await provider.shutdown();
}
main().catch((e) => { console.error(e); process.exit(1); });
