// The founding scenario of issue 23, from the host's side: the SDK 1.32
// client calls a tool through tests/mcp/cut_proxy.py, which lets the call
// happen and then resets the connection instead of passing the answer on. The
// host sees an error, does what a host should do with an idempotency key (the
// same call again, the same key), and must be told the saved outcome.
//
//   node cut_client.mjs               (run by tests/integration/43_mcp_sdk.sh)
// Environment: MCP_URL (the proxy), MCP_TOKEN, KEY (the idempotency key).
// Prints "told<TAB>attempt N<TAB>what the client was told" for every call,
// and "ok<TAB>..." / "not ok<TAB>...<TAB>detail" checks; exits 0 when it ran
// to the end.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const url = new URL(process.env.MCP_URL);
const token = process.env.MCP_TOKEN;
const key = process.env.KEY;
const KEY_META = 'outbox-relay/idempotency-key';

function check(cond, desc, detail = '') {
    if (cond) {
        console.log(`ok\t${desc}`);
    } else {
        const text = typeof detail === 'string' ? detail : JSON.stringify(detail);
        console.log(`not ok\t${desc}\t${String(text).replace(/\s+/g, ' ').slice(0, 600)}`);
    }
}

function told(attempt, what) {
    console.log(`told\tattempt ${attempt}\t${what.replace(/\s+/g, ' ').slice(0, 400)}`);
}

function describe(err) {
    const cause = err?.cause ? ` (cause: ${err.cause.code ?? ''} ${err.cause.message ?? err.cause})` : '';
    return `error ${err?.constructor?.name}: ${err?.message}${cause}`;
}

const transport = new StreamableHTTPClientTransport(url, {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: 'outbox-relay-cut-test', version: '1.0.0' });
const timeout = { timeout: 30000 };
const call = { name: 'refund', arguments: { account: 77, amount_cents: 7700 }, _meta: { [KEY_META]: key } };

try {
    await client.connect(transport, timeout);
    await client.listTools(undefined, timeout);
    check(true, 'cut: the SDK client connected through the proxy and listed the tools');
} catch (err) {
    check(false, 'cut: the SDK client connected through the proxy and listed the tools', describe(err));
    process.exit(0);
}

// Attempt 1: the proxy resets the connection after the front door answered.
let firstError;
try {
    const res = await client.callTool(call, undefined, timeout);
    told(1, `a result: ${JSON.stringify(res.structuredContent ?? res)}`);
} catch (err) {
    firstError = err;
    told(1, describe(err));
}
check(firstError !== undefined, 'cut: the first call ends in an error at the client (the answer was lost)',
    'the client got a result');

// Attempt 2..: what a host does with a key after an error: the same call again.
let result;
for (let attempt = 2; attempt <= 3 && result === undefined; attempt++) {
    try {
        result = await client.callTool(call, undefined, timeout);
        told(attempt, `a result: ${JSON.stringify(result.structuredContent)}`);
    } catch (err) {
        told(attempt, describe(err));
    }
}
const sc = result?.structuredContent ?? {};
check(result !== undefined && result.isError !== true && sc.status === 'succeeded' && sc.key === key,
    'cut: the same call again with the same key is told the saved outcome: succeeded', result);
check(sc.response_status === 200 && sc.attempts === 1 && sc.response?.effect === 1,
    'cut: the saved response of the one delivery (one attempt, the receiver\'s first effect)', sc);
await client.close();
