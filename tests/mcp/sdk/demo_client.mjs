// make demo-mcp's agent host: the official SDK 1.32 client makes CALLS tool
// calls (CONCURRENCY at a time) through tests/mcp/cut_proxy.py, which loses
// the first answer of some calls. Each call carries the key of its step,
// {run}:{step}; after an error the host calls again with the same key, as it
// should. Prints one line per call that needed a retry, then a summary line
// "SUMMARY calls=N retries=N succeeded=N other=N failed_for_good=N".
//
// Environment: MCP_URL, MCP_TOKEN, CALLS (300), CONCURRENCY (8); TOOL
// (refund; another tool gets {"title": "step I"}) and RUN (demo-run, the
// keys' prefix).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const calls = Number(process.env.CALLS ?? 300);
const concurrency = Number(process.env.CONCURRENCY ?? 8);
let retries = 0, succeeded = 0, other = 0, gaveUp = 0, next = 0;

async function connect() {
    const transport = new StreamableHTTPClientTransport(new URL(process.env.MCP_URL), {
        requestInit: { headers: { Authorization: `Bearer ${process.env.MCP_TOKEN}` } },
    });
    const client = new Client({ name: 'demo-agent-host', version: '1.0.0' });
    await client.connect(transport, { timeout: 30000 });
    return client;
}

async function step(client, i) {
    const run = `${process.env.RUN ?? 'demo-run'}-${Math.floor(i / 4)}`, key = `${run}:step-${i % 4}`;
    const tool = process.env.TOOL ?? 'refund';
    const args = tool === 'refund' ? { account: i % 100, amount_cents: 25 } : { title: `step ${i}` };
    const told = [];
    for (let attempt = 1; attempt <= 5; attempt++) {
        try {
            const res = await client.callTool({ name: tool, arguments: args,
                _meta: { 'outbox-relay/idempotency-key': key } }, undefined, { timeout: 30000 });
            const sc = res.structuredContent ?? {};
            told.push(`${sc.status} (${sc.attempts} attempt${sc.attempts === 1 ? '' : 's'})`);
            if (sc.status === 'succeeded') succeeded++; else other++;
            if (attempt > 1) console.log(`   ${key}: told ${told.join(', then ')}`);
            return;
        } catch (err) {
            retries++;
            told.push(`an error (${err?.cause?.code ?? err?.message ?? err})`);
        }
    }
    gaveUp++;
    console.log(`   ${key}: gave up after ${told.join(', ')}`);
}

async function worker() {
    const client = await connect();
    for (let i = next++; i < calls; i = next++) await step(client, i);
    await client.close();
}
await Promise.all(Array.from({ length: concurrency }, worker));
console.log(`SUMMARY calls=${calls} retries=${retries} succeeded=${succeeded} other=${other} failed_for_good=${gaveUp}`);
