// An upstream MCP server for tests/integration/76_mcp_import.sh (outbox-relay
// mcp-import), on the official TypeScript SDK's low-level Server (1.32, the
// 2025-11-25 era): McpServer lists every tool in one answer, and the import
// must follow nextCursor, so tools/list here answers PAGE tools at a time.
//
//   TOOLS=FILE     a JSON array of tools ({name, title?, description?,
//                  inputSchema, annotations?}); read again at every
//                  tools/list, so the test drops a tool by rewriting it
//   PAGE=N         tools per page (default 2)
//   MODE=stateless a new server and transport per request (JSON answers)
//   MODE=stateful  sessions (Mcp-Session-Id)
//   TOKEN=T        requests must carry "Authorization: Bearer T"
//   HEADER=N:V     requests must carry the header N with the value V
//   LOG=FILE       each tools/list appends "list <cursor>", each call
//                  "call <name> <key>"
// Any tool call answers "called <name>" as a text block.
// Prints "listening <port>" once it listens on 127.0.0.1.
import http from "node:http";
import fs from "node:fs";
import { randomUUID } from "node:crypto";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { ListToolsRequestSchema, CallToolRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const MODE = process.env.MODE || "stateless";
const PAGE = Number(process.env.PAGE || 2);
const TOKEN = process.env.TOKEN || "";
const LOG = process.env.LOG || "/dev/null";
const [HEADER_NAME, HEADER_VALUE] = (process.env.HEADER || "").split(":");
const KEY_META = "outbox-relay/idempotency-key";

function makeServer() {
    const server = new Server({ name: "import-upstream", version: "1.0.0" }, { capabilities: { tools: {} } });
    server.setRequestHandler(ListToolsRequestSchema, async (request) => {
        const tools = JSON.parse(fs.readFileSync(process.env.TOOLS, "utf8"));
        const cursor = request.params?.cursor;
        fs.appendFileSync(LOG, `list ${cursor ?? "-"}\n`);
        const start = cursor ? Number(cursor) : 0;
        const page = tools.slice(start, start + PAGE);
        const next = start + PAGE < tools.length ? String(start + PAGE) : undefined;
        return next ? { tools: page, nextCursor: next } : { tools: page };
    });
    server.setRequestHandler(CallToolRequestSchema, async (request) => {
        const key = request.params._meta?.[KEY_META] ?? "(no key)";
        fs.appendFileSync(LOG, `call ${request.params.name} ${key}\n`);
        return { content: [{ type: "text", text: `called ${request.params.name}` }] };
    });
    return server;
}

const sessions = new Map();

async function readBody(req) {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const text = Buffer.concat(chunks).toString("utf8");
    return text ? JSON.parse(text) : undefined;
}

const httpServer = http.createServer(async (req, res) => {
    try {
        if (TOKEN && req.headers.authorization !== `Bearer ${TOKEN}`) {
            res.writeHead(401, { "content-type": "application/json" }).end('{"error":"unauthorized"}');
            return;
        }
        if (HEADER_NAME && req.headers[HEADER_NAME.toLowerCase()] !== HEADER_VALUE) {
            res.writeHead(403, { "content-type": "application/json" }).end('{"error":"header missing"}');
            return;
        }
        const body = req.method === "POST" ? await readBody(req) : undefined;
        if (MODE === "stateless") {
            const server = makeServer();
            const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
            res.on("close", () => {
                transport.close();
                server.close();
            });
            await server.connect(transport);
            await transport.handleRequest(req, res, body);
            return;
        }
        const sid = req.headers["mcp-session-id"];
        let transport = sid ? sessions.get(sid) : undefined;
        if (!transport) {
            if (sid) {
                res.writeHead(404).end();
                return;
            }
            transport = new StreamableHTTPServerTransport({
                sessionIdGenerator: () => randomUUID(),
                enableJsonResponse: true,
                onsessioninitialized: (id) => {
                    sessions.set(id, transport);
                    fs.appendFileSync(LOG, `session ${id}\n`);
                },
            });
            await makeServer().connect(transport);
        }
        await transport.handleRequest(req, res, body);
    } catch (e) {
        if (!res.headersSent) res.writeHead(500).end(String(e));
    }
});

httpServer.listen(Number(process.env.PORT || 0), "127.0.0.1", () => {
    console.log(`listening ${httpServer.address().port}`);
});
