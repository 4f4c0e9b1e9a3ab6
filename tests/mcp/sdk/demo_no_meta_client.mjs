// make demo-mcp, part two: a host that cannot set _meta (most desktop, IDE
// and hosted assistants). The SDK 1.32 client makes CALLS tool calls
// (CONCURRENCY at a time) of a tool whose key_source is 'arguments', each
// with its own arguments and NO idempotency key, through
// tests/mcp/cut_proxy.py (CUT_WITHOUT_KEY=1), which loses the first answer
// of some calls. After an error the host does what such a host does: it
// calls again with the same arguments. Prints one line per call that needed a retry, then
// "SUMMARY calls=N retries=N succeeded=N other=N failed_for_good=N".
//
// Environment: MCP_URL, MCP_TOKEN, CALLS (100), CONCURRENCY (8).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const calls = Number(process.env.CALLS ?? 100);
const concurrency = Number(process.env.CONCURRENCY ?? 8);
let retries = 0, succeeded = 0, other = 0, gaveUp = 0, next = 0;

async function connect() {
    const transport = new StreamableHTTPClientTransport(new URL(process.env.MCP_URL), {
        requestInit: { headers: { Authorization: `Bearer ${process.env.MCP_TOKEN}` } },
    });
    const client = new Client({ name: 'no-meta-host', version: '1.0.0' });
    await client.connect(transport, { timeout: 30000 });
    return client;
}

async function step(client, i) {
    const args = { account: 1000 + i, amount_cents: 25, reference: `order-${i}`, reason: 'customer asked' };
    const told = [];
    for (let attempt = 1; attempt <= 5; attempt++) {
        try {
            const res = await client.callTool({ name: 'refund_by_args', arguments: args }, undefined,
                { timeout: 30000 });
            const sc = res.structuredContent ?? {};
            told.push(`${sc.status} (${sc.attempts} attempt${sc.attempts === 1 ? '' : 's'}, key ${sc.key})`);
            if (sc.status === 'succeeded') succeeded++; else other++;
            if (attempt > 1) console.log(`   order-${i}: told ${told.join(', then ')}`);
            return;
        } catch (err) {
            retries++;
            told.push(`an error (${err?.cause?.code ?? err?.message ?? err})`);
        }
    }
    gaveUp++;
    console.log(`   order-${i}: gave up after ${told.join(', ')}`);
}

async function worker() {
    const client = await connect();
    for (let i = next++; i < calls; i = next++) await step(client, i);
    await client.close();
}
await Promise.all(Array.from({ length: concurrency }, worker));
console.log(`SUMMARY calls=${calls} retries=${retries} succeeded=${succeeded} other=${other} failed_for_good=${gaveUp}`);
