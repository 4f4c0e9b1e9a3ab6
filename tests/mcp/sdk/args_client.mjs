// A host that cannot set _meta (issue 37, item 1): the SDK 1.32 client calls
// tools whose key_source is 'arguments' with no idempotency key at all.
// Run by tests/integration/77_mcp_argument_keys.sh:
//   1. through tests/mcp/cut_proxy.py (CUT_WITHOUT_KEY=1), which lets the
//      first call happen and resets the connection instead of answering:
//      the host sees an error and calls again with the same arguments, and
//      is told the saved outcome (the same key, one attempt);
//   2. straight to the front door: a volatile property reworded (the same
//      action), other arguments (a new one), two identical calls at once
//      (one key), a key in _meta (it wins), the same arguments after the
//      short window of refund_short (a new action), and a 'minted' tool
//      (a new key per call).
// Environment: PROXY_URL, MCP_URL, MCP_TOKEN. Prints "ok<TAB>..." /
// "not ok<TAB>...<TAB>detail" checks, "told<TAB>..." lines, and
// "key<TAB>NAME<TAB>KEY" lines for the scenario's database checks.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const timeout = { timeout: 30000 };

function check(cond, desc, detail = '') {
    if (cond) {
        console.log(`ok\t${desc}`);
    } else {
        const text = typeof detail === 'string' ? detail : JSON.stringify(detail);
        console.log(`not ok\t${desc}\t${String(text).replace(/\s+/g, ' ').slice(0, 600)}`);
    }
}
const told = (what, text) => console.log(`told\t${what}\t${text.replace(/\s+/g, ' ').slice(0, 400)}`);
const keyLine = (name, key) => console.log(`key\t${name}\t${key}`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function connect(url) {
    const transport = new StreamableHTTPClientTransport(new URL(url), {
        requestInit: { headers: { Authorization: `Bearer ${process.env.MCP_TOKEN}` } },
    });
    const client = new Client({ name: 'no-meta-host', version: '1.0.0' });
    await client.connect(transport, timeout);
    return client;
}

const refund = (args) => ({ name: 'refund', arguments: args });

// ---- 1. the answer is lost; the host calls again with the same arguments ----
const viaProxy = await connect(process.env.PROXY_URL);
const { tools } = await viaProxy.listTools(undefined, timeout);
const listed = tools.find((t) => t.name === 'refund');
check(/Calling this tool again with the same arguments within 10 minutes of the first call returns the first call's outcome and does not act again; to make a second, identical action on purpose, call it with a new "reference"\.$/.test(listed?.description ?? ''),
    'tools/list: the description tells the model what a repeat does and names "reference" for a second action',
    listed?.description);
check(listed?.annotations?.idempotentHint === true, 'tools/list: refund is idempotent (idempotentHint)', listed);
const minted = tools.find((t) => t.name === 'refund_minted');
check(minted && minted.annotations?.idempotentHint === false && !/Calling this tool again/.test(minted.description),
    'tools/list: a minted tool is not idempotent and gets no sentence', minted);

const first = { account: 77, amount_cents: 7700, reference: 'r-1', reason: 'customer-asked' };
let firstError;
try {
    const res = await viaProxy.callTool(refund(first), undefined, timeout);
    told('first call', `a result: ${JSON.stringify(res.structuredContent)}`);
} catch (err) {
    firstError = err;
    told('first call', `error ${err?.message}`);
}
check(firstError !== undefined, 'lost answer: the first call ends in an error at the host');
let again;
for (let attempt = 2; attempt <= 3 && again === undefined; attempt++) {
    try {
        again = await viaProxy.callTool(refund(first), undefined, timeout);
        told(`retry ${attempt}`, JSON.stringify(again.structuredContent));
    } catch (err) {
        told(`retry ${attempt}`, `error ${err?.message}`);
    }
}
const sc = again?.structuredContent ?? {};
check(again && again.isError !== true && sc.status === 'succeeded' && /^args-[0-9a-f]{32}-/.test(sc.key ?? ''),
    'lost answer: the retry with no _meta is told the saved outcome, under a key from the arguments', sc);
check(sc.attempts === 1 && sc.response?.effect === 1,
    'lost answer: the saved response of the one delivery (one attempt, the receiver\'s first effect)', sc);
keyLine('first', sc.key);
await viaProxy.close();

// ---- 2. straight to the front door ------------------------------------------
const c = await connect(process.env.MCP_URL);
const call = async (params) => (await c.callTool(params, undefined, timeout)).structuredContent ?? {};

const reworded = await call(refund({ ...first, reason: 'the-customer-asked-again' }));
check(reworded.key === sc.key && reworded.status === 'succeeded' && reworded.attempts === 1,
    'a volatile property reworded: the same action, its saved outcome', reworded);
const reordered = await call(refund({ reason: 'x', reference: 'r-1', amount_cents: 7700.0, account: 77 }));
check(reordered.key === sc.key, 'the same arguments in another order: the same action', reordered);

const other = await call(refund({ ...first, amount_cents: 7800 }));
check(other.key !== sc.key && /^args-/.test(other.key ?? ''), 'other arguments: a new action, a new key', other);
keyLine('other', other.key);
const second = await call(refund({ ...first, reference: 'r-2' }));
check(second.key !== sc.key, 'a new reference: a second, identical refund on purpose', second);
keyLine('second', second.key);

const same = { account: 78, amount_cents: 100, reference: 'r-3' };
const [a, b] = await Promise.all([call(refund(same)), call(refund(same))]);
check(a.key === b.key && /^args-/.test(a.key ?? ''), 'two identical calls at once: one key', [a, b]);
keyLine('race', a.key);

const withMeta = await call({ name: 'refund', arguments: first, _meta: { 'outbox-relay/idempotency-key': 'host-key-77' } });
check(withMeta.key === 'host-key-77' && withMeta.key !== sc.key,
    'a call that carries a key in _meta uses it, whatever key_source says', withMeta);
keyLine('meta', withMeta.key);

const short = { name: 'refund_short', arguments: { account: 79, amount_cents: 100 } };
const s1 = await call(short);
// Past the window (2 s, counted from the first call): wait longer than that,
// then the same arguments are a new action. (A lower bound, not a deadline.)
await sleep(3000);
const s3 = await call(short);
check(/^args-/.test(s1.key ?? '') && /^args-/.test(s3.key ?? '') && s3.key !== s1.key,
    'refund_short: the same arguments after the window: a new action', [s1, s3]);
keyLine('short1', s1.key);
keyLine('short2', s3.key);

const m1 = await call({ name: 'refund_minted', arguments: { account: 80, amount_cents: 100 } });
const m2 = await call({ name: 'refund_minted', arguments: { account: 80, amount_cents: 100 } });
check(/^minted-/.test(m1.key ?? '') && /^minted-/.test(m2.key ?? '') && m1.key !== m2.key,
    'key_source minted: still a new key per call', [m1, m2]);
keyLine('minted1', m1.key);
keyLine('minted2', m2.key);
await c.close();
