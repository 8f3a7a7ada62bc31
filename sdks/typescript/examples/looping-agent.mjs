// A looping agent, as in the product documents, from Node.js.
//   cd sdks/typescript && npm install && npm run build
//   KEELWAVE_API_KEY=kw_… node examples/looping-agent.mjs
import { Keelwave, getCurrentRun } from "../dist/index.js";

const client = new Keelwave(); // KEELWAVE_API_KEY, KEELWAVE_ENDPOINT (default http://localhost:8080)

const webSearch = client.observe("web_search", async ({ q, max_results }) => ({
  results: Array.from({ length: max_results }, (_, i) => `result ${i} for ${q}`),
}));

const runLoop = client.agent("looping-agent", async (question) => {
  for (let i = 0; i < 5; i++) {
    // The second identical call marks the run as a loop, starting at step 1.
    await webSearch({ q: question, max_results: 3 });
  }
  return getCurrentRun()?.id ?? "";
});

const runId = await runLoop("What is keelwave?");
await client.flush();
console.log(`run ${runId}: see it with \`keelwave runs show ${runId.slice(0, 8)}\``);
