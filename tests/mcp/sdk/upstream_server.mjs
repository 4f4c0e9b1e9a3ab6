// An upstream MCP server written with the official TypeScript SDK's McpServer
// (1.32, the 2025-11-25 era), for tests/integration/74_mcp_upstream.sh: the
// relay delivers intents for an 'mcp' target to it as tools/call.
//
//   MODE=stateless   a new server and transport per request, JSON answers
//   MODE=stateful    sessions (Mcp-Session-Id), JSON answers
//   MODE=sse         sessions, answers as text/event-stream (a progress
//                    notification before the result)
//   MODE=drop        stateless; create_ticket acts, then the connection is
//                    destroyed before the answer, once per key (the lost answer)
//   ticket_status    the status tool: {"key"} → structuredContent {"executed"}
//   summarize        asks the client, on the call's stream, for a sampling, an
//                    elicitation and its roots (requests of the server), writes
//                    "asked <method>: <code> <message>" per answer, then acts
//                    (MODE=sse: the requests reach the client only on a stream)
//   DEDUPE=1         the key in _meta["outbox-relay/idempotency-key"] is
//                    honoured: a key seen before gets its first result, no
//                    second effect (then MODE=drop drops the first answer only)
//   EFFECTS=FILE     each effect appends "effect <tool> <key>" to FILE, each call
//                    of create_ticket received "call create_ticket <key>"
//   TOKEN=T          requests must carry "Authorization: Bearer T"
// Prints "listening <port>" once it listens on 127.0.0.1 (PORT, or any).
import http from "node:http";
import fs from "node:fs";
import { randomUUID } from "node:crypto";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { z } from "zod";
import {
    CreateMessageResultSchema,
    ElicitResultSchema,
    ListRootsResultSchema,
} from "@modelcontextprotocol/sdk/types.js";

const MODE = process.env.MODE || "stateless";
const DEDUPE = process.env.DEDUPE === "1";
const EFFECTS = process.env.EFFECTS || "/dev/null";
const TOKEN = process.env.TOKEN || "";
const KEY_META = "outbox-relay/idempotency-key";

const seen = new Map(); // key -> the first result (DEDUPE)
const effected = new Set(); // keys that acted (ticket_status)
const dropped = new Set(); // keys whose first answer was dropped (MODE=drop)
let tickets = 0;

function effect(tool, key) {
    fs.appendFileSync(EFFECTS, `effect ${tool} ${key}\n`);
}

// One McpServer; req is the HTTP request being answered (drop mode cuts it).
function makeServer(current) {
    const server = new McpServer({ name: `upstream-${MODE}`, version: "1.0.0" });
    server.registerTool(
        "create_ticket",
        {
            description: "Open a ticket (an effect per call, or per key with DEDUPE=1).",
            inputSchema: { title: z.string() },
        },
        async ({ title }, extra) => {
            const key = extra._meta?.[KEY_META] ?? "(no key)";
            fs.appendFileSync(EFFECTS, `call create_ticket ${key}\n`); // every call received
            if (DEDUPE && seen.has(key)) return seen.get(key);
            if (MODE === "sse")
                await extra.sendNotification({
                    method: "notifications/progress",
                    params: { progressToken: "p", progress: 1, total: 2 },
                });
            effect("create_ticket", key);
            effected.add(key);
            tickets += 1;
            const id = `T-${tickets}`;
            const result = {
                content: [{ type: "text", text: `ticket ${id} opened: ${title}` }],
                structuredContent: { ticket: id, title },
            };
            if (DEDUPE) seen.set(key, result);
            if (MODE === "drop" && !dropped.has(key)) {
                dropped.add(key);
                current.req.socket.destroy(); // acted; the answer to the key's first call is lost
            }
            return result;
        },
    );
    // The status tool of targets.status_tool: did a call with this key act?
    server.registerTool(
        "ticket_status",
        { description: "Whether a create_ticket call with this key acted.", inputSchema: { key: z.string() } },
        async ({ key }) => {
            fs.appendFileSync(EFFECTS, `asked ${key}\n`);
            const executed = effected.has(key);
            return { content: [{ type: "text", text: String(executed) }], structuredContent: { executed } };
        },
    );
    // A tool that needs the client during the call. A gateway has no model,
    // user or roots to give: each request must be answered with an error,
    // or the call waits for the SDK's request timeout.
    server.registerTool(
        "summarize",
        { description: "Summarizes with the host's model, asks the user, reads the roots.", inputSchema: { text: z.string() } },
        async ({ text }, extra) => {
            const key = extra._meta?.[KEY_META] ?? "(no key)";
            const asks = [
                ["sampling/createMessage", { messages: [{ role: "user", content: { type: "text", text } }], maxTokens: 10 }, CreateMessageResultSchema],
                ["elicitation/create", { message: "Which account?", requestedSchema: { type: "object", properties: {} } }, ElicitResultSchema],
                ["roots/list", {}, ListRootsResultSchema],
            ];
            for (const [method, params, schema] of asks) {
                try {
                    await extra.sendRequest({ method, params }, schema);
                    fs.appendFileSync(EFFECTS, `asked ${method}: answered\n`);
                } catch (e) {
                    fs.appendFileSync(EFFECTS, `asked ${method}: ${e.code} ${String(e.message).replace(/\n/g, " ")}\n`);
                }
            }
            effect("summarize", key);
            return { content: [{ type: "text", text: `summary of ${text.length} characters, without the host` }] };
        },
    );
    server.registerTool(
        "close_account",
        { description: "Always refuses: the account is closed.", inputSchema: { account: z.number() } },
        async ({ account }, extra) => {
            effect("close_account", extra._meta?.[KEY_META] ?? "(no key)");
            return { content: [{ type: "text", text: `account ${account} is already closed` }], isError: true };
        },
    );
    return server;
}

const sessions = new Map(); // session id -> transport
const dropState = { req: null };

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
        const body = req.method === "POST" ? await readBody(req) : undefined;
        if (MODE === "stateless" || MODE === "drop") {
            const server = makeServer({ req }); // this request's: concurrent calls each drop their own
            const transport = new StreamableHTTPServerTransport({
                sessionIdGenerator: undefined,
                enableJsonResponse: true,
            });
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
                res.writeHead(404, { "content-type": "application/json" }).end(
                    '{"jsonrpc":"2.0","error":{"code":-32001,"message":"Session not found"},"id":null}',
                );
                return;
            }
            transport = new StreamableHTTPServerTransport({
                sessionIdGenerator: () => randomUUID(),
                enableJsonResponse: MODE !== "sse",
                onsessioninitialized: (id) => {
                    sessions.set(id, transport);
                    fs.appendFileSync(EFFECTS, `session ${id}\n`);
                },
            });
            await makeServer(dropState).connect(transport);
        }
        await transport.handleRequest(req, res, body);
    } catch (e) {
        if (!res.headersSent) res.writeHead(500).end(String(e));
    }
});

// Forget every session (the test's "server restarted"): a call with an old id gets 404.
process.on("SIGUSR1", () => {
    sessions.clear();
    fs.appendFileSync(EFFECTS, "sessions forgotten\n");
});

httpServer.listen(Number(process.env.PORT || 0), "127.0.0.1", () => {
    console.log(`listening ${httpServer.address().port}`);
});
