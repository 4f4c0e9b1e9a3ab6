// `outbox-relay mcp --stdio` as local hosts start it (issue 37): the official
// SDK 1.32's StdioClientTransport (2025-11-25: initialize, tools, keys, a
// task) and @modelcontextprotocol/client 2.x's (2026-07-28: server/discover,
// the _meta envelope and no headers), each spawning the front door as its
// child; then the same binary spawned by hand, to see the bytes: stdout
// carries JSON-RPC lines only, a task's settle is a notification line, a bad
// line gets an error line, end of input answers what is in flight and exits
// 0, the per-client call limit holds lines back rather than refusing them,
// and a missing or unknown token ends the process before a byte is written.
//
//   node stdio_client.mjs             (run by tests/integration/78_mcp_stdio.sh)
// Environment: RELAY_BIN, MCP_DB (the front door's --db), MCP_TOKEN (of the
// client MCP_CLIENT), KEY_PREFIX, and libpq's PG* for psql (the scenario's). Prints "ok<TAB>description" or "not ok<TAB>description<TAB>detail"
// per check and exits 0 when it ran to the end.
import { execFileSync, spawn } from 'node:child_process';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { Client as Client2 } from '@modelcontextprotocol/client';
import { StdioClientTransport as StdioClientTransport2 } from '@modelcontextprotocol/client/stdio';

const relay = process.env.RELAY_BIN;
const db = process.env.MCP_DB;
const token = process.env.MCP_TOKEN;
const prefix = process.env.KEY_PREFIX ?? 'stdio:';
const clientName = process.env.MCP_CLIENT ?? 'desktop';
const KEY_META = 'outbox-relay/idempotency-key';
const args = ['mcp', '--stdio', '--db', db, '--mcp-wait-ms', '10000'];
const timeout = { timeout: 30000 };

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

// ---- SDK 1.32, 2025-11-25 ----------------------------------------------------------------
const stderr1 = [];
const transport = new StdioClientTransport({
    command: relay, args, env: { ...process.env, OUTBOX_MCP_TOKEN: token }, stderr: 'pipe',
});
transport.stderr?.on('data', (d) => stderr1.push(d.toString()));
const client = new Client({ name: 'outbox-relay-stdio-test', version: '1.0.0' });
const refundArgs = { account: 42, amount_cents: 2500 };

await step('SDK 1.32 stdio: connect (spawns outbox-relay mcp --stdio, initialize)', async () => {
    await client.connect(transport, timeout);
    const info = client.getServerVersion();
    check(info?.name === 'outbox-relay' && client.getServerCapabilities()?.tools !== undefined,
        'SDK 1.32 stdio: connected; serverInfo outbox-relay, tools capability', info);
});

await step('SDK 1.32 stdio: tools/list', async () => {
    const res = await client.listTools(undefined, timeout);
    const refund = res.tools.find((t) => t.name === 'refund') ?? {};
    check(refund.inputSchema?.type === 'object' &&
        JSON.stringify(refund.inputSchema?.required) === JSON.stringify(['account', 'amount_cents']),
    'SDK 1.32 stdio: tools/list has refund and its inputSchema', res.tools);
    check(refund.execution?.taskSupport === 'optional',
        'SDK 1.32 stdio: 2025-11-25 negotiated (execution.taskSupport is there)', refund);
});

const first = await step('SDK 1.32 stdio: tools/call with the key in _meta', async () => {
    const res = await client.callTool(
        { name: 'refund', arguments: refundArgs, _meta: { [KEY_META]: `${prefix}1` } }, undefined, timeout);
    const sc = res.structuredContent ?? {};
    check(res.isError !== true && sc.status === 'succeeded' && sc.key === `${prefix}1` &&
        sc.response_status === 200 && sc.response?.ok === true,
    'SDK 1.32 stdio: tools/call succeeded with the receiver\'s response', res);
    return res;
});

await step('SDK 1.32 stdio: the same key and arguments again (replay)', async () => {
    const res = await client.callTool(
        { name: 'refund', arguments: refundArgs, _meta: { [KEY_META]: `${prefix}1` } }, undefined, timeout);
    check(first !== undefined && sameJson(res.structuredContent, first.structuredContent),
        'SDK 1.32 stdio: the replay returns the saved outcome', { again: res.structuredContent });
});

await step('SDK 1.32 stdio: the key with other arguments', async () => {
    const res = await client.callTool(
        { name: 'refund', arguments: { account: 42, amount_cents: 1 }, _meta: { [KEY_META]: `${prefix}1` } },
        undefined, timeout);
    check(res.isError === true && res.structuredContent?.status === 'key_conflict',
        'SDK 1.32 stdio: the key with other arguments: key_conflict', res);
});

await step('SDK 1.32 stdio: a task-augmented call', async () => {
    const seen = [];
    let result;
    const stream = client.experimental.tasks.callToolStream(
        { name: 'refund', arguments: { account: 7, amount_cents: 700 }, _meta: { [KEY_META]: `${prefix}task` } },
        undefined, { ...timeout, task: { ttl: 60000 } });
    for await (const msg of stream) {
        seen.push(msg.type === 'taskCreated' || msg.type === 'taskStatus' ? `${msg.type}:${msg.task?.status}` : msg.type);
        if (msg.type === 'result') result = msg.result;
    }
    check(seen[0]?.startsWith('taskCreated:') && result?.structuredContent?.status === 'succeeded',
        'SDK 1.32 stdio: the task was created and completed with the outcome succeeded', { seen, result });
});

await step('SDK 1.32 stdio: close', async () => {
    await client.close();
    const lines = stderr1.join('').split('\n').filter((l) => l.length > 0);
    check(lines.length > 0 && lines.every((l) => { try { return typeof JSON.parse(l).event === 'string'; } catch { return false; } }),
        'SDK 1.32 stdio: stderr carried the JSON log lines (and only them)', lines.slice(0, 3));
    check(lines.some((l) => l.includes('"event":"mcp_stdio_ready"')),
        'SDK 1.32 stdio: the log says the client was recognised (mcp_stdio_ready)', lines.slice(0, 3));
});

// ---- client 2.x, 2026-07-28 --------------------------------------------------------------
const transport2 = new StdioClientTransport2({
    command: relay, args, env: { ...process.env, OUTBOX_MCP_TOKEN: token }, stderr: 'ignore',
});
const client2 = new Client2({ name: 'outbox-relay-stdio-v2', version: '1.0.0' },
    { versionNegotiation: { mode: { pin: '2026-07-28' } } });
await step('client 2.x stdio: connect (server/discover, no headers)', async () => {
    await client2.connect(transport2, timeout);
    check(client2.getProtocolEra() === 'modern', 'client 2.x stdio: connected in the modern era',
        client2.getProtocolEra());
});
const first2 = await step('client 2.x stdio: tools/call with the key in _meta', async () => {
    const res = await client2.callTool(
        { name: 'refund', arguments: { account: 9, amount_cents: 900 }, _meta: { [KEY_META]: `${prefix}2` } }, timeout);
    check(res.isError !== true && res.structuredContent?.status === 'succeeded',
        'client 2.x stdio: tools/call succeeded', res);
    return res;
});
await step('client 2.x stdio: replay', async () => {
    const res = await client2.callTool(
        { name: 'refund', arguments: { account: 9, amount_cents: 900 }, _meta: { [KEY_META]: `${prefix}2` } }, timeout);
    check(first2 !== undefined && sameJson(res.structuredContent, first2.structuredContent),
        'client 2.x stdio: the replay returns the saved outcome', res.structuredContent);
});
await step('client 2.x stdio: close', async () => client2.close());

// ---- by hand: the bytes ------------------------------------------------------------------

// Spawns the front door; send(lines) writes; end() closes its stdin;
// waitFor(pred) resolves with the first stdout line (parsed) matching.
function raw(extraArgs = [], env = { ...process.env, OUTBOX_MCP_TOKEN: token }) {
    const child = spawn(relay, [...args, ...extraArgs], { env, stdio: ['pipe', 'pipe', 'pipe'] });
    const out = [];
    const err = [];
    const waiters = [];
    let partial = '';
    child.stdout.on('data', (d) => {
        partial += d.toString();
        let nl;
        while ((nl = partial.indexOf('\n')) >= 0) {
            const line = partial.slice(0, nl);
            partial = partial.slice(nl + 1);
            out.push(line);
            let msg;
            try { msg = JSON.parse(line); } catch { msg = undefined; }
            for (const w of waiters.splice(0)) {
                if (msg !== undefined && w.pred(msg)) w.resolve(msg); else waiters.push(w);
            }
        }
    });
    child.stderr.on('data', (d) => err.push(d.toString()));
    child.stdin.on('error', () => {}); // a process that exits before reading
    const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
    return {
        out, err, exited,
        get partial() { return partial; },
        send: (...msgs) => child.stdin.write(msgs.map((m) => (typeof m === 'string' ? m : JSON.stringify(m)) + '\n').join('')),
        end: () => child.stdin.end(),
        waitFor: (pred, ms = 60000) => new Promise((resolve, reject) => {
            for (const line of out) {
                try { const m = JSON.parse(line); if (pred(m)) { resolve(m); return; } } catch { /* not JSON */ }
            }
            const t = setTimeout(() => reject(new Error('no such line on stdout')), ms);
            waiters.push({ pred, resolve: (m) => { clearTimeout(t); resolve(m); } });
        }),
        kill: () => child.kill('SIGKILL'),
    };
}

const legacyInit = {
    jsonrpc: '2.0', id: 1, method: 'initialize',
    params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
};
const call = (id, key, account, extra = {}) => ({
    jsonrpc: '2.0', id, method: 'tools/call',
    params: { name: 'refund', arguments: { account, amount_cents: 100 }, _meta: { [KEY_META]: `${prefix}${key}` }, ...extra },
});

await step('by hand: a session, a bad line, a task and its notification, then end of input', async () => {
    const p = raw();
    p.send(legacyInit, { jsonrpc: '2.0', method: 'notifications/initialized' },
        { jsonrpc: '2.0', id: 2, method: 'tools/list' }, 'this is not json',
        call(3, 'raw-task', 11, { task: { ttl: 60000 } }));
    const init = await p.waitFor((m) => m.id === 1);
    check(init.result?.protocolVersion === '2025-11-25', 'by hand: initialize negotiated 2025-11-25', init);
    const list = await p.waitFor((m) => m.id === 2);
    check(list.result?.tools?.some((t) => t.name === 'refund' && t.execution?.taskSupport === 'optional'),
        'by hand: tools/list answered in the negotiated version (no header names it)', list);
    const bad = await p.waitFor((m) => m.error?.code === -32700);
    check(bad.id === null, 'by hand: a line that is not JSON gets a -32700 error line with id null', bad);
    const created = await p.waitFor((m) => m.id === 3);
    const taskId = created.result?.task?.taskId;
    check(typeof taskId === 'string', 'by hand: the task-augmented call is answered with its task', created);
    const note = await p.waitFor((m) => m.method === 'notifications/tasks/status' && m.params?.status === 'completed');
    check(note.params?.taskId === taskId && note.id === undefined,
        'by hand: the task\'s settle came as a notifications/tasks/status line (completed)', note);
    p.send({ jsonrpc: '2.0', id: 4, method: 'tasks/result', params: { taskId } });
    const result = await p.waitFor((m) => m.id === 4);
    check(result.result?.structuredContent?.status === 'succeeded', 'by hand: tasks/result gives the outcome', result);
    p.end();
    const { code } = await p.exited;
    check(code === 0, 'by hand: end of input: the process exits 0', code);
    check(p.partial === '' && p.out.length >= 6 && p.out.every((l) => {
        try { return JSON.parse(l).jsonrpc === '2.0'; } catch { return false; }
    }), 'by hand: every byte on stdout was a JSON-RPC line', p.out.slice(0, 8));
    const logs = p.err.join('').split('\n').filter((l) => l.length > 0);
    check(logs.some((l) => l.includes('"event":"mcp_shutdown"') && l.includes('end of input')),
        'by hand: the log on stderr says it stopped at the end of input', logs.slice(-3));
    check(!logs.join('\n').includes(token), 'by hand: the token is not in the log', '');
});

await step('by hand: end of input with calls in flight, at most one call at a time', async () => {
    // --mcp-client-calls 1: the second and third lines wait in the pipe
    // until the first call is answered; none is refused.
    const p = raw(['--mcp-client-calls', '1']);
    p.send(legacyInit, call(2, 'eof-1', 21), call(3, 'eof-2', 22), call(4, 'eof-3', 23));
    p.end();
    const { code } = await p.exited;
    const byId = Object.fromEntries(p.out.map((l) => JSON.parse(l)).map((m) => [m.id, m]));
    check(code === 0, 'by hand: end of input right after three calls: exit 0', { code, err: p.err.join('').slice(-400) });
    check([2, 3, 4].every((id) => byId[id]?.result?.structuredContent?.key === `${prefix}eof-${id - 1}`),
        'by hand: each call in flight was answered (with what was known) before the exit', p.out);
    check(!p.out.some((l) => l.includes('Too many requests')), 'by hand: the call limit held lines back, it refused none', p.out);
});

// The state of an intent, as the scenario's superuser reads it.
const intentState = (key) => execFileSync('psql', ['-X', '-tA', '-c',
    `SELECT state FROM outbox.intents WHERE key = 'mcp:${clientName}:${prefix}${key}'`]).toString().trim();
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
async function untilState(key, want, seconds) {
    for (let i = 0; i < seconds * 10; i++) {
        if (intentState(key) === want) return true;
        await sleep(100);
    }
    return false;
}

await step('by hand: notifications/cancelled: the waiting call gets no answer', async () => {
    // slow_refund's receiver holds each request 6 s: the call waits for it.
    const p = raw();
    p.send(legacyInit, {
        jsonrpc: '2.0', id: 5, method: 'tools/call',
        params: { name: 'slow_refund', arguments: { account: 5, amount_cents: 500 }, _meta: { [KEY_META]: `${prefix}cancel-1` } },
    });
    await p.waitFor((m) => m.id === 1);
    const sent = await untilState('cancel-1', 'in_flight', 60);
    check(sent, 'by hand: the slow call is enqueued and being delivered', intentState('cancel-1'));
    p.send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 5, reason: 'changed my mind' } },
        { jsonrpc: '2.0', id: 6, method: 'ping' });
    await p.waitFor((m) => m.id === 6);
    const settled = await untilState('cancel-1', 'succeeded', 60);
    // a call still waiting would be answered within a second of the settle
    // (its NOTIFY, else the 1 s recheck)
    await sleep(3000);
    p.end();
    const { code } = await p.exited;
    check(settled && code === 0 && !p.out.some((l) => JSON.parse(l).id === 5),
        'by hand: after notifications/cancelled no answer came for it, though its intent succeeded (it goes on)',
        { settled, code, out: p.out.map((l) => l.slice(0, 80)) });
});

await step('by hand: an unknown token', async () => {
    const p = raw([], { ...process.env, OUTBOX_MCP_TOKEN: 'not-a-token-of-anyone' });
    p.send(legacyInit);
    const { code } = await p.exited;
    const err = p.err.join('');
    check(code === 1, 'by hand: an unknown token: exit 1', code);
    check(p.out.length === 0 && p.partial === '', 'by hand: an unknown token: nothing on stdout', p.out);
    check(err.includes('"event":"mcp_stdio_refused"') && err.includes('OUTBOX_MCP_TOKEN'),
        'by hand: an unknown token: the reason is on stderr', err.slice(-400));
    check(!err.includes('not-a-token-of-anyone'), 'by hand: the token is not in the log', '');
});

await step('by hand: no token', async () => {
    const env = { ...process.env };
    delete env.OUTBOX_MCP_TOKEN;
    const p = raw([], env);
    p.end();
    const { code } = await p.exited;
    check(code === 2 && p.out.length === 0 && p.partial === '' && p.err.join('').includes('OUTBOX_MCP_TOKEN is not set'),
        'by hand: no OUTBOX_MCP_TOKEN: exit 2, the reason on stderr, nothing on stdout', { code, err: p.err.join('') });
});
