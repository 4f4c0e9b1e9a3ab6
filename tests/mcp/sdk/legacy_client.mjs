// The front door through the official TypeScript SDK 1.32 client, as a
// 2025-11-25 host runs it: Client + StreamableHTTPClientTransport with a
// bearer token; initialize, tools/list, tools/call with the idempotency key in
// _meta, the same call again, the key with other arguments, arguments that
// fail the schema, and a task-augmented call through the SDK's task API.
//
//   node legacy_client.mjs            (run by tests/integration/43_mcp_sdk.sh)
// Environment: MCP_URL, MCP_TOKEN, KEY_PREFIX (keys are KEY_PREFIX + "1"...).
// Prints "ok<TAB>description" or "not ok<TAB>description<TAB>detail" per
// check, like tests/mcp/protocol_checks.py, and exits 0 when it ran to the end.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const url = new URL(process.env.MCP_URL);
const token = process.env.MCP_TOKEN;
const prefix = process.env.KEY_PREFIX ?? 'sdk1:';
const KEY_META = 'outbox-relay/idempotency-key';

function check(cond, desc, detail = '') {
    if (cond) {
        console.log(`ok\t${desc}`);
    } else {
        const text = typeof detail === 'string' ? detail : JSON.stringify(detail);
        console.log(`not ok\t${desc}\t${String(text).replace(/\s+/g, ' ').slice(0, 600)}`);
    }
}

// Runs one step; an exception fails that step with its message, not the run.
async function step(desc, fn) {
    try {
        return await fn();
    } catch (err) {
        check(false, desc, `threw ${err?.constructor?.name} ${err?.code ?? ''}: ${err?.message}`);
        return undefined;
    }
}

const transport = new StreamableHTTPClientTransport(url, {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: 'outbox-relay-sdk1-test', version: '1.0.0' });
const timeout = { timeout: 30000 };

await step('SDK 1.32: connect (initialize + notifications/initialized)', async () => {
    await client.connect(transport, timeout);
    const info = client.getServerVersion();
    const caps = client.getServerCapabilities();
    check(info?.name === 'outbox-relay' && caps?.tools !== undefined,
        'SDK 1.32: connected; serverInfo outbox-relay, tools capability', { info, caps });
    check(transport.protocolVersion === '2025-11-25', 'SDK 1.32: negotiated 2025-11-25', transport.protocolVersion);
    check(transport.sessionId === undefined, 'SDK 1.32: no session id (stateless)', transport.sessionId);
});

const tools = await step('SDK 1.32: tools/list', async () => {
    const res = await client.listTools(undefined, timeout);
    const byName = Object.fromEntries(res.tools.map((t) => [t.name, t]));
    const refund = byName.refund ?? {};
    check(refund.name === 'refund' && typeof refund.description === 'string' && refund.description.length > 0,
        'SDK 1.32: tools/list has the refund tool with its description', res.tools.map((t) => t.name));
    check(JSON.stringify(refund.inputSchema?.required) === JSON.stringify(['account', 'amount_cents']) &&
        refund.inputSchema?.type === 'object' && refund.inputSchema?.properties?.account?.type === 'integer',
        'SDK 1.32: inputSchema is the registered one', refund.inputSchema);
    check(refund.outputSchema?.type === 'object' &&
        JSON.stringify(refund.outputSchema?.required) === JSON.stringify(['status', 'key', 'message']),
        'SDK 1.32: outputSchema describes the result envelope', refund.outputSchema);
    check(refund.annotations?.idempotentHint === true, 'SDK 1.32: annotations.idempotentHint is true',
        refund.annotations);
    check(refund.execution?.taskSupport === 'optional', 'SDK 1.32: execution.taskSupport is optional',
        refund.execution);
    return byName;
});

const args = { account: 42, amount_cents: 2500 };
// callTool validates structuredContent against the tool's outputSchema
// (ajv, in the SDK) once tools/list has been read: a pass below also means
// the front door's results match the schema it publishes.
const first = await step('SDK 1.32: tools/call with the key in _meta', async () => {
    const res = await client.callTool(
        { name: 'refund', arguments: args, _meta: { [KEY_META]: `${prefix}1` } }, undefined, timeout);
    const sc = res.structuredContent ?? {};
    check(res.isError !== true && sc.status === 'succeeded' && sc.key === `${prefix}1`,
        'SDK 1.32: tools/call succeeded (structuredContent.status, key)', res);
    check(sc.response_status === 200 && sc.response?.ok === true,
        'SDK 1.32: structuredContent carries the receiver\'s saved response', sc);
    const text = res.content?.[0]?.text ?? '';
    const cut = text.indexOf('\n');
    check(res.content?.[0]?.type === 'text' && cut > 0 && text.slice(0, cut) === sc.message &&
        sameJson(JSON.parse(text.slice(cut + 1)), sc),
        'SDK 1.32: the text block starts with the message, then the same JSON as structuredContent', res.content);
    return res;
});

function sameJson(a, b) {
    const norm = (v) => (v && typeof v === 'object' && !Array.isArray(v))
        ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, norm(v[k])]))
        : Array.isArray(v) ? v.map(norm) : v;
    return JSON.stringify(norm(a)) === JSON.stringify(norm(b));
}

await step('SDK 1.32: the same key and arguments again', async () => {
    const res = await client.callTool(
        { name: 'refund', arguments: args, _meta: { [KEY_META]: `${prefix}1` } }, undefined, timeout);
    check(first !== undefined && sameJson(res.structuredContent, first.structuredContent),
        'SDK 1.32: the same key again gives the same structuredContent', { again: res.structuredContent,
            first: first?.structuredContent });
});

await step('SDK 1.32: the key with other arguments', async () => {
    const res = await client.callTool(
        { name: 'refund', arguments: { account: 42, amount_cents: 9999 }, _meta: { [KEY_META]: `${prefix}1` } },
        undefined, timeout);
    check(res.isError === true && res.structuredContent?.status === 'key_conflict',
        'SDK 1.32: the key with other arguments: isError, status key_conflict', res);
});

await step('SDK 1.32: arguments that fail the inputSchema', async () => {
    const res = await client.callTool(
        { name: 'refund', arguments: { account: 'x' }, _meta: { [KEY_META]: `${prefix}bad` } },
        undefined, timeout);
    // The SDK validates structuredContent against the outputSchema even when
    // isError is true: an error result must match the published schema too
    // (or carry no structuredContent).
    check(res.isError === true &&
        (res.structuredContent === undefined || res.structuredContent.status === 'invalid_arguments'),
    'SDK 1.32: arguments that fail the schema: an isError result the SDK accepts', res);
});

await step('SDK 1.32: a call without a key', async () => {
    let code;
    try {
        await client.callTool({ name: 'refund', arguments: args }, undefined, timeout);
    } catch (err) {
        code = err.code;
    }
    check(code === -32602, 'SDK 1.32: a call without a key is refused with -32602 (McpError)', code);
});

await step('SDK 1.32: a task-augmented call', async () => {
    const seen = [];
    let result;
    let error;
    const stream = client.experimental.tasks.callToolStream(
        { name: 'refund', arguments: { account: 7, amount_cents: 700 }, _meta: { [KEY_META]: `${prefix}task` } },
        undefined, { ...timeout, task: { ttl: 60000 } });
    for await (const msg of stream) {
        seen.push(msg.type === 'taskCreated' || msg.type === 'taskStatus' ? `${msg.type}:${msg.task?.status}` : msg.type);
        if (msg.type === 'result') result = msg.result;
        if (msg.type === 'error') error = msg.error;
    }
    check(seen[0] === 'taskCreated:working' || seen[0] === 'taskCreated:completed',
        'SDK 1.32 tasks: the call was answered with a task', seen);
    check(result?.structuredContent?.status === 'succeeded' && error === undefined,
        'SDK 1.32 tasks: the task completed with the outcome succeeded', { seen, result, error: error?.message });
    check(result?._meta?.['io.modelcontextprotocol/related-task']?.taskId !== undefined,
        'SDK 1.32 tasks: the result names its task', result?._meta);
});

await step('SDK 1.32: ping', async () => {
    check(JSON.stringify(await client.ping(timeout)) === '{}', 'SDK 1.32: ping', '');
});

await client.close();
