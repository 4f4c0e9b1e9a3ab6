// tests/bench/peers/worker.mjs — graphile-worker draining a full queue into
// the bench's nginx (tests/bench/peers.sh, `make bench-peers`).
//
//   node worker.mjs --db URL --url URL --jobs N [--concurrency 50]
//                   [--local-queue 200] [--batch-delay 20] [--pool 52]
//                   [--client http|fetch]
//
// One task, `deliver`: POST the job's payload (JSON) to URL with
// `Content-Type: application/json` and `Idempotency-Key: <job id>` as the
// relay sends, read the answer whole, and fail the job unless it is a 200
// (graphile-worker then retries it later, as the relay would). The client:
//   http   (default) node:http with an Agent({keepAlive: true}), one
//          connection per worker: the cheaper client, about 70 µs of CPU per
//          request here (20,000 POSTs, 50 at once, to the bench's nginx);
//   fetch  Node's fetch (undici's global agent, keep-alive, no cap on
//          connections per origin): about 270 µs per request in the same
//          loop, which would make the peer look four times dearer than it
//          has to be.
//
// Tuned as graphile-worker's performance docs suggest for many small jobs:
// concurrentJobs 50, the local queue (preset.worker.localQueue.size, 200:
// jobs fetched and locked in batches by the pool, handed to the 50 workers
// without a round trip each) and batched completion
// (preset.worker.completeJobBatchDelay / failJobBatchDelay, 20 ms: the
// completions of that window go to the database in one statement). The
// sizes are the best of a sweep (tests/bench/peers.sh). The connection pool
// is what graphile-worker recommends (and warns about when smaller):
// maxPoolSize = max(10, concurrency + 2).
//
// The drain is timed from the call to run() (modules loaded; the runner's
// start-up, its schema check and LISTEN included) to the moment the jobs
// table is seen empty: graphile-worker deletes a job when its completion is
// committed, so that is the last completion, batched or not. The table is
// polled (every 5 ms) only once every task has answered, so the poll adds
// nothing during the drain. Prints one line:
//   jobs N ok N failed F wall_s W first_task_s T
import http from "node:http";
import { Logger, makeWorkerUtils, run } from "graphile-worker";

function parseArgs(argv) {
    const opts = { concurrency: 50, localQueue: 200, batchDelay: 20, pool: 0, client: "http" };
    for (let i = 2; i < argv.length; i += 2) {
        const [k, v] = [argv[i], argv[i + 1]];
        if (v === undefined) throw new Error(`${k} needs a value`);
        if (k === "--db") opts.db = v;
        else if (k === "--url") opts.url = v;
        else if (k === "--jobs") opts.jobs = Number(v);
        else if (k === "--concurrency") opts.concurrency = Number(v);
        else if (k === "--local-queue") opts.localQueue = Number(v);
        else if (k === "--batch-delay") opts.batchDelay = Number(v);
        else if (k === "--pool") opts.pool = Number(v);
        else if (k === "--client") opts.client = v;
        else throw new Error(`unknown option ${k}`);
    }
    if (!opts.db || !opts.url || !(opts.jobs > 0)) {
        throw new Error("usage: worker.mjs --db URL --url URL --jobs N [--concurrency K] [--local-queue S] [--batch-delay MS]");
    }
    if (opts.client !== "fetch" && opts.client !== "http") throw new Error("--client is fetch or http");
    if (!(opts.pool > 0)) opts.pool = Math.max(10, opts.concurrency + 2);
    return opts;
}

const opts = parseArgs(process.argv);
let ok = 0;
let failed = 0;
let firstTask = null;
let allAnswered;
const answered = new Promise((resolve) => {
    allAnswered = resolve;
});

// post(payload, key) → the answer's status, the answer read whole (so that
// the connection goes back to its pool).
const body = (payload) => JSON.stringify(payload);
const postFetch = async (payload, key) => {
    const res = await fetch(opts.url, {
        method: "POST",
        headers: { "Content-Type": "application/json", "Idempotency-Key": key },
        body: body(payload),
    });
    await res.arrayBuffer();
    return res.status;
};
const target = new URL(opts.url);
const agent = new http.Agent({ keepAlive: true });
const postHttp = (payload, key) =>
    new Promise((resolve, reject) => {
        const data = body(payload);
        const req = http.request(
            {
                agent,
                host: target.hostname,
                port: target.port,
                path: target.pathname,
                method: "POST",
                headers: {
                    "Content-Type": "application/json",
                    "Content-Length": Buffer.byteLength(data),
                    "Idempotency-Key": key,
                },
            },
            (res) => {
                res.resume();
                res.on("end", () => resolve(res.statusCode));
                res.on("error", reject);
            },
        );
        req.on("error", reject);
        req.end(data);
    });
const post = opts.client === "http" ? postHttp : postFetch;

const taskList = {
    async deliver(payload, helpers) {
        if (firstTask === null) firstTask = performance.now();
        let status;
        try {
            status = await post(payload, String(helpers.job.id));
        } catch (e) {
            failed++;
            throw e;
        }
        if (status !== 200) {
            failed++;
            throw new Error(`HTTP ${status}`);
        }
        ok++;
        if (ok === opts.jobs) allAnswered();
    },
};

// graphile-worker's info lines (one per job at concurrency 50 would cost
// the peer CPU the relay does not spend: its info log has no line per
// success) are dropped; warnings and errors go to stderr.
const logger = new Logger(() => (level, message) => {
    if (level === "error" || level === "warning") process.stderr.write(`${level}: ${message}\n`);
});
// Its own pool for the completion poll, connected before the clock starts.
const utils = await makeWorkerUtils({ connectionString: opts.db, logger });
await utils.withPgClient((c) => c.query("SELECT 1"));

const t0 = performance.now();
const runner = await run({
    taskList,
    logger,
    preset: {
        worker: {
            connectionString: opts.db,
            concurrentJobs: opts.concurrency,
            maxPoolSize: opts.pool,
            localQueue: { size: opts.localQueue },
            completeJobBatchDelay: opts.batchDelay,
            failJobBatchDelay: opts.batchDelay,
        },
    },
});
await answered;
// Every task answered; the last completions may still sit in a batch.
let left = -1;
while (left !== 0) {
    const r = await utils.withPgClient((c) => c.query("SELECT count(*)::int AS n FROM graphile_worker._private_jobs"));
    left = r.rows[0].n;
    if (left !== 0) await new Promise((r2) => setTimeout(r2, 5));
}
const t1 = performance.now();
await utils.release();
await runner.stop();
console.log(
    `jobs ${opts.jobs} ok ${ok} failed ${failed} wall_s ${((t1 - t0) / 1000).toFixed(3)} ` +
        `first_task_s ${(((firstTask ?? t1) - t0) / 1000).toFixed(3)}`,
);
