// The front door through the official @modelcontextprotocol/client 2.x in
// the 2026-07-28 era: no initialize; server/discover, then every request
// carries the _meta envelope and the Mcp-* headers. Pinned to 2026-07-28,
// then once more in 'auto' mode (the client probes and must choose modern).
//
//   node modern_client.mjs            (run by tests/integration/43_mcp_sdk.sh)
// Environment: MCP_URL, MCP_TOKEN, KEY_PREFIX (keys are KEY_PREFIX + "1"...).
// Prints "ok<TAB>description" or "not ok<TAB>description<TAB>detail" per
// check, like tests/mcp/protocol_checks.py, and exits 0 when it ran to the end.
//
// The client declares no tasks extension: client 2.x cannot consume a
// 2026 task result (resultType "task"), so the front door must answer
// such a client with the outcome itself.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const url = new URL(process.env.MCP_URL);
const token = process.env.MCP_TOKEN;
const prefix = process.env.KEY_PREFIX ?? 'v2:';
const KEY_META = 'outbox-relay/idempotency-key';
const MODERN = '2026-07-28';

function check(cond, desc, detail = '') {
    if (cond) {
        console.log(`ok\t${desc}`);
    } else {
        const text = typeof detail === 'string' ? detail : JSON.stringify(detail);
        console.log(`not ok\t${desc}\t${String(text).replace(/\s+/g, ' ').slice(0, 600)}`);
    }
}

async function step(desc, fn) {
    try {
        return await fn();
    } catch (err) {
        check(false, desc, `threw ${err?.constructor?.name} ${err?.code ?? ''}: ${err?.message}`);
        return undefined;
    }
}

function sameJson(a, b) {
    const norm = (v) => (v && typeof v === 'object' && !Array.isArray(v))
        ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, norm(v[k])]))
        : Array.isArray(v) ? v.map(norm) : v;
    return JSON.stringify(norm(a)) === JSON.stringify(norm(b));
}

function newClient(mode) {
    const transport = new StreamableHTTPClientTransport(url, {
        requestInit: { headers: { Authorization: `Bearer ${token}` } },
    });
    const client = new Client({ name: 'outbox-relay-v2-test', version: '1.0.0' },
        { versionNegotiation: { mode } });
    return { client, transport };
}

const timeout = { timeout: 30000 };
const { client, transport } = newClient({ pin: MODERN });

await step('client 2.x (pin 2026-07-28): connect', async () => {
    await client.connect(transport, timeout);
    check(client.getProtocolEra() === 'modern', 'client 2.x: connected in the modern era', client.getProtocolEra());
    const d = client.getDiscoverResult() ?? {};
    check(Array.isArray(d.supportedVersions) && d.supportedVersions.includes(MODERN),
        'client 2.x: server/discover lists 2026-07-28', d);
    check(d.capabilities?.tools !== undefined, 'client 2.x: server/discover offers tools', d.capabilities);
});

await step('client 2.x: tools/list', async () => {
    const res = await client.listTools(undefined, timeout);
    const refund = res.tools.find((t) => t.name === 'refund') ?? {};
    check(refund.name === 'refund' && refund.inputSchema?.type === 'object' &&
        JSON.stringify(refund.inputSchema?.required) === JSON.stringify(['account', 'amount_cents']),
    'client 2.x: tools/list has refund and its inputSchema', res.tools);
    check(refund.annotations?.idempotentHint === true && refund.outputSchema?.type === 'object',
        'client 2.x: annotations.idempotentHint and the outputSchema', refund);
    check(refund.execution === undefined, 'client 2.x: no 2025-era execution field in a 2026 tools/list', refund);
});

const args = { account: 9, amount_cents: 900 };
const first = await step('client 2.x: tools/call with the key in _meta', async () => {
    const res = await client.callTool(
        { name: 'refund', arguments: args, _meta: { [KEY_META]: `${prefix}1` } }, timeout);
    const sc = res.structuredContent ?? {};
    check(res.isError !== true && sc.status === 'succeeded' && sc.key === `${prefix}1` && sc.response_status === 200,
        'client 2.x: tools/call succeeded with the receiver\'s response', res);
    return res;
});

await step('client 2.x: the same key and arguments again', async () => {
    const res = await client.callTool(
        { name: 'refund', arguments: args, _meta: { [KEY_META]: `${prefix}1` } }, timeout);
    check(first !== undefined && sameJson(res.structuredContent, first.structuredContent),
        'client 2.x: the same key again gives the same structuredContent',
        { again: res.structuredContent, first: first?.structuredContent });
});

await step('client 2.x: the key with other arguments', async () => {
    const res = await client.callTool(
        { name: 'refund', arguments: { account: 9, amount_cents: 1 }, _meta: { [KEY_META]: `${prefix}1` } },
        timeout);
    check(res.isError === true && res.structuredContent?.status === 'key_conflict',
        'client 2.x: the key with other arguments: isError, key_conflict', res);
});

await step('client 2.x: arguments that fail the inputSchema', async () => {
    const res = await client.callTool(
        { name: 'refund', arguments: { account: 'x' }, _meta: { [KEY_META]: `${prefix}bad` } }, timeout);
    check(res.isError === true &&
        (res.structuredContent === undefined || res.structuredContent.status === 'invalid_arguments'),
        'client 2.x: arguments that fail the schema: an isError result the client accepts', res);
});

await step('client 2.x: an unknown tool', async () => {
    let code;
    try {
        await client.callTool({ name: 'no_such_tool', arguments: {}, _meta: { [KEY_META]: `${prefix}2` } }, timeout);
    } catch (err) {
        code = err.code;
    }
    check(code === -32602, 'client 2.x: an unknown tool is refused with -32602', code);
});

await client.close();

// 'auto': the client probes with server/discover and falls back to
// initialize only if the server is legacy-only; the front door is dual-era.
const auto = newClient('auto');
await step('client 2.x (auto): connect', async () => {
    await auto.client.connect(auto.transport, timeout);
    check(auto.client.getProtocolEra() === 'modern', 'client 2.x (auto): chooses the modern era',
        auto.client.getProtocolEra());
    const res = await auto.client.callTool(
        { name: 'refund', arguments: { account: 10, amount_cents: 1000 }, _meta: { [KEY_META]: `${prefix}auto` } },
        timeout);
    check(res.structuredContent?.status === 'succeeded', 'client 2.x (auto): tools/call succeeded', res);
});
await auto.client.close();
