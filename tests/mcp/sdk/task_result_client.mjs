// tasks/result through the official TypeScript SDK 1.32 client, on a task
// whose target answers after longer than the front door's --mcp-wait-ms: the
// front door answers it as an SSE stream (comment lines, then the message),
// and the SDK must read it as the task's completed result.
//
//   node task_result_client.mjs    (run by tests/integration/73_mcp_protocol_second_round.sh)
// Environment: MCP_URL, MCP_TOKEN, TOOL, KEY. Prints "ok<TAB>description" or
// "not ok<TAB>description<TAB>detail" per check; exits 0 when it ran to the end.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, CreateTaskResultSchema } from '@modelcontextprotocol/sdk/types.js';

function check(cond, desc, detail = '') {
    if (cond) {
        console.log(`ok\t${desc}`);
    } else {
        const text = typeof detail === 'string' ? detail : JSON.stringify(detail);
        console.log(`not ok\t${desc}\t${String(text).replace(/\s+/g, ' ').slice(0, 600)}`);
    }
}

const transport = new StreamableHTTPClientTransport(new URL(process.env.MCP_URL), {
    requestInit: { headers: { Authorization: `Bearer ${process.env.MCP_TOKEN}` } },
});
const client = new Client({ name: 'outbox-relay-task-result-test', version: '1.0.0' });
const timeout = { timeout: 30000 };
try {
    await client.connect(transport, timeout);
    const created = await client.request({
        method: 'tools/call',
        params: {
            name: process.env.TOOL, arguments: { n: 73 }, task: { ttl: 600000 },
            _meta: { 'outbox-relay/idempotency-key': process.env.KEY },
        },
    }, CreateTaskResultSchema, timeout);
    const taskId = created.task?.taskId;
    check(created.task?.status === 'working', 'SDK 1.32: the task-augmented call returns a working task', created);
    const result = await client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema, timeout);
    check(result?.structuredContent?.status === 'succeeded' &&
          result?._meta?.['io.modelcontextprotocol/related-task']?.taskId === taskId,
        'SDK 1.32: tasks/result right away blocks past --mcp-wait-ms and reads the streamed answer: succeeded',
        result);
} catch (err) {
    check(false, 'SDK 1.32: tasks/result of a slow task', `threw ${err?.constructor?.name} ${err?.code ?? ''}: ${err?.message}`);
}
await client.close();
