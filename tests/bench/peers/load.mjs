// tests/bench/peers/load.mjs — graphile-worker's schema and N queued jobs
// for tests/bench/peers.sh (`make bench-peers`).
//
//   node load.mjs --db URL --jobs N [--migrate-only]
//
// Installs (or checks) the graphile_worker schema with the package's own
// migrations, then enqueues N `deliver` jobs through
// graphile_worker.add_jobs, the batch form of add_job, in chunks of 1,000
// from two sessions at once (as the bench enqueues the relay's intents from
// two sessions). Each payload has the shape of the relay's bench payload
// (tests/bench/run.sh: PAYLOAD_SQL). No job_key: a key makes add_jobs upsert
// and graphile-worker users do not need one to get a job done once.
import { makeWorkerUtils } from "graphile-worker";

const args = process.argv.slice(2);
const opt = (name) => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : undefined;
};
const db = opt("--db");
const jobs = Number(opt("--jobs") ?? 0);
if (!db) {
    console.error("usage: load.mjs --db URL --jobs N [--migrate-only]");
    process.exit(2);
}

const CHUNK = 1000;
const ADD = `SELECT count(*) FROM graphile_worker.add_jobs(ARRAY(
    SELECT ROW('deliver', json_build_object('account', g % 1000, 'amount_cents', 2500 + g % 100,
               'currency', 'EUR', 'reason', 'duplicate charge', 'run_id', 'bench-run', 'step', g),
               NULL, NULL, NULL, NULL, NULL, NULL)::graphile_worker.job_spec
      FROM generate_series($1::int, $2::int) g))`;

const utils = await makeWorkerUtils({ connectionString: db, maxPoolSize: 2 });
try {
    await utils.migrate();
    if (!args.includes("--migrate-only") && jobs > 0) {
        // Two sessions, each taking every other chunk.
        const session = (first) =>
            utils.withPgClient(async (c) => {
                let added = 0;
                for (let lo = 1 + first * CHUNK; lo <= jobs; lo += 2 * CHUNK) {
                    const r = await c.query(ADD, [lo, Math.min(lo + CHUNK - 1, jobs)]);
                    added += Number(r.rows[0].count);
                }
                return added;
            });
        const added = (await Promise.all([session(0), session(1)])).reduce((a, b) => a + b, 0);
        if (added !== jobs) throw new Error(`added ${added} jobs, not ${jobs}`);
        console.log(`added ${added}`);
    }
} finally {
    await utils.release();
}
