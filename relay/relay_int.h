/*
 * relay_int.h — the daemon's state, private to relay*.c.
 *
 * Owns struct relay (the process) and struct relay_db (one database it
 * serves), and their lifecycle (enum relay_phase). Four files share it,
 * and their calls go one way, relay_run.c → relay.c ⇄ relay_db.c →
 * relay_status.c:
 *   relay_run.c     the process: from a config to an exit code (relay.h);
 *   relay.c         the process's scheduler: deliveries on the curl multi,
 *                   the fair share of --max-in-flight, timers, SIGHUP and
 *                   shutdown, the only writer of the phase;
 *   relay_db.c      one database's scheduler (claim → record → lease,
 *                   take-over, reconciliation, its targets), which starts
 *                   its deliveries and asks for room through relay.c;
 *   relay_status.c  what others read of the relay (the admin port, the
 *                   heartbeat in outbox.relays, the log).
 * No other file includes this header. The leaves they use know nothing of
 * the relay: record_batch.c (outcomes waiting, outbox.record's arrays),
 * id_batch.c (rows to give back), stmt_slot.c (one statement of a kind on
 * the wire), sql.c (rows of the answers), target_events.c (reports about a
 * target), outcome.c and flow.c (decisions and their texts), targets.c
 * (which targets have room).
 */
#ifndef OUTBOX_RELAY_INT_H
#define OUTBOX_RELAY_INT_H

#include "admin/admin.h"
#include "config.h"
#include "deliver.h"
#include "lib/http_client.h"
#include "id_batch.h"
#include "lib/metrics.h"
#include "outcome.h"
#include "lib/pg.h"
#include "prune.h"
#include "record_batch.h"
#include "lib/stmt_slot.h"
#include "lib/strbuf.h"
#include "target_events.h"
#include "targets.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

/* Where the relay is in its life. It only moves down this list (a failed
 * start goes straight to RELAY_CLOSING); the comments say what each phase
 * allows, and which of the old booleans it replaces. */
enum relay_phase {
    /* Connecting; outbox.targets not read yet, so nothing is claimed, taken
     * over or reconciled, and /readyz says "targets not loaded yet". The
     * first load of the targets moves on. (Was: !targets_loaded.) */
    RELAY_STARTING,
    /* Claims, delivers, records, renews leases, takes over expired ones and
     * asks status URLs about unknown rows. */
    RELAY_RUNNING,
    /* SIGTERM or SIGINT came, or --exit-when-idle found nothing left: no
     * more claims, take-overs or status checks. Deliveries in flight get
     * --grace-ms, their outcomes are recorded as they end, and once nothing
     * is left the relay says goodbye (outbox.relay_gone). /readyz says
     * "shutting down". (Was: stopping.) */
    RELAY_DRAINING,
    /* The grace period is over: what was still in flight was aborted (a
     * request that was sent is ambiguous, one that was not is released).
     * The last outcomes and releases are written, then the goodbye; if the
     * database has not taken them within SHUTDOWN_RECORD_WAIT_MS the relay
     * exits 1, and their rows are taken over by another relay. A second
     * signal skips straight here. (Was: aborting.) */
    RELAY_RECORDING,
    /* Every handle is being closed (after the goodbye, the record deadline,
     * or a failed start); the loop ends with the last one. (Was: closing.) */
    RELAY_CLOSING,
};

/* One of a database's two claims (relay_db.c, "Two lanes"): the floor
 * claim on the main connection, the sweep on a connection of its own. Each
 * has at most one statement on the wire; the two run side by side. The
 * kind is also the lane's index in struct target's claiming. */
enum claim_lane_kind { CLAIM_FLOOR = 0, CLAIM_SWEEP = 1 };

struct claim_lane {
    struct relay_db *db;
    enum claim_lane_kind kind;
    struct stmt_slot slot;
    bool again;          /* asked for while one ran: claim once more after it */
    bool handing_out;    /* its answer's rows are being started: no claim of it now */
    int limit;           /* the limit of the claim on the wire */
    uint64_t started_ns; /* of the claim on the wire */
};

/* One database the relay serves (--db, or a line of --databases): its three
 * connections, its LISTEN, its targets and their flow control, the rows it
 * holds under lease and the outcomes waiting for it. Nothing here is shared
 * with another database: one that is down, slow or refusing logins keeps
 * its own outcomes and backs off on its own connections, and the others
 * never wait for it (relay_db.c). */
/* The name of the one database of --db, in logs and metrics. */
#define RELAY_DEFAULT_DATABASE "default"

struct relay_db {
    struct relay *relay;
    struct relay_db *next;
    char *name;           /* labels logs and metrics ("default" for --db) */
    char *conninfo;       /* libpq conninfo or URL, with any OUTBOX_SECRET_ password */
    uint64_t config_seen; /* --databases: the generation of the file that last named it */
    /* Removed from --databases (SIGHUP): claims nothing more, writes what it
     * holds, says goodbye, then closes and is freed. */
    bool removing;
    bool loaded;                /* outbox.targets read once: claims may start */
    bool version_ok;            /* the schema's version was checked at connect (--databases) */
    uint64_t last_version_ms;   /* of the last check's answer */
    uint64_t version_logged_ms; /* of the last schema_version_refused line */
    bool said_goodbye;          /* the farewell went (or could not): its closing may start */
    bool closing;               /* its connections are being closed */
    int open_conns;             /* connections not yet closed (close callbacks to come) */

    pg_conn_t *pg;         /* floor claims, leases, LISTEN, admin lookups */
    pg_conn_t *pg_rec;     /* outbox.record only */
    pg_conn_t *pg_sweep;   /* the sweep and take-over: the scans that may take long */
    struct pruner *pruner; /* retention, on a connection of its own; NULL: off */
    /* --databases with an admin port: this database's status page
     * (/ui?database=NAME, relay/admin/ui.c), its connection opened at the
     * first page; NULL otherwise (--db: the admin port's own). */
    struct ui *ui;
    struct target_set targets;
    uv_timer_t poll_timer;  /* fallback poll, and its next due row */
    uv_timer_t sweep_timer; /* the next sweep (flow_sweep_period_ms) */

    struct delivery *deliveries; /* in flight */
    int in_flight;

    /* Outcomes from the end of a delivery to outbox.record (record_batch.h). */
    struct record_queue records;

    /* Claimed rows never sent, to give back (outbox.release). */
    struct id_batch releases;
    size_t releases_on_wire; /* the first ones of releases, while release.running */

    struct target_reporter reporter; /* flow reports to outbox.target_event */

    /* The statements of which at most one is on the wire (stmt_slot.h);
     * they replace nine "*_running" flags, and farewell (the goodbye to
     * outbox.relays, sent once) the flag farewell_sent. */
    struct stmt_slot next_due, idle_change, release, take_over, renew, reconcile, targets_load,
        live_counts_query, farewell, version;

    /* Claiming. */
    struct claim_lane claim, sweep;
    bool sweep_wanted;        /* a sweep is due: it starts once it has room and its connection */
    bool claim_during_sweep;  /* a floor claim was tried while the sweep held rooms */
    int sweep_failures;       /* sweeps in a row that failed or answered late */
    uint64_t sweep_period_ms; /* the last period set (flow_sweep_period_ms) */
    bool more_due;            /* the last claim was limited by capacity, not by due rows */
    bool wants_room;          /* a claim found no room in the process's budget (fair share) */
    bool idle_seen;           /* --exit-when-idle: nothing due and nothing held here */
    int empty_claims;         /* claims in a row that found nothing: spaces out the next */
    struct strbuf claim_targets, claim_rooms; /* the targets with room, for claim and next_due */
    struct strbuf release_ids, release_attempts;

    /* The idle flag in outbox.relays (enqueues NOTIFY an idle relay). */
    bool idle_in_db;         /* what outbox.relays says, or will once the change is written */
    bool idle_wanted;        /* the last wish; idle_in_db follows it */
    uint64_t idle_raised_ms; /* loop time the flag was last raised (kept up a while) */
    uint64_t last_heartbeat_ms;
    uint64_t last_targets_ms;

    /* What the admin port reads (relay_status.c). */
    uint64_t last_live_counts_ms; /* when the last refresh was sent (loop time) */
    uint64_t live_counts_took_ms; /* how long it took to answer (flow_live_counts_interval_ms) */
    int64_t live_counts[4];       /* pending, in_flight, unknown, awaiting_approval */
    double oldest_due_age_s;
    bool live_counts_valid;         /* the last refresh answered: the gauges are written */
    uint64_t live_counts_failures;  /* refreshes that failed (a counter on /metrics) */
    uint64_t live_counts_logged_ms; /* of the last live_counts_failed line (one a minute) */
    struct metrics_histogram delivery_seconds;
    struct metrics_histogram claim_seconds;

    /* Counters for the closing log line and /metrics. */
    uint64_t record_retries; /* record batches refused for a transient reason, kept and retried */
    uint64_t claimed, attempts_by_class[CLASS_COUNT], taken_over, recorded, fenced_out, released,
        claims_late, swept;
};

/* The process: one loop, one curl multi (two: h2 apart), the budget of
 * --max-in-flight shared fairly by the databases (relay.c), the admin port,
 * the signals, and the phase. */
struct relay {
    uv_loop_t loop;
    const struct config *cfg;
    enum relay_phase phase;
    int exit_code;

    struct relay_db *dbs; /* in the order of the file; --db: one, "default" */
    int db_count;
    bool db_named; /* --databases: logs name the database of a line */
    http_client_t *http;
    http_client_t *http2; /* h2 deliveries: DELIVERY_H2_CONNECTIONS_PER_HOST */

    uv_timer_t maintenance_timer; /* leases, take-over, heartbeat, targets, retries of record */
    uv_timer_t shutdown_timer;    /* grace period, then the record deadline */
    uv_signal_t sigterm, sigint, sighup;

    int in_flight; /* every database's deliveries */
    /* Errors answering MCP servers' requests (DELIVERY_MCP_REPLY): made in
     * libcurl's write callback, put on the multi by reply_timer (0 ms) once
     * the callback returned; not counted in in_flight. */
    struct delivery *replies_pending; /* through mcp_next */
    struct delivery *replies;         /* on the multi (prev, next) */
    uv_timer_t reply_timer;
    uint64_t last_pool_trim_ms;
    int in_flight_peak; /* the most deliveries at once since the last pool trim */
    uint64_t rng;

    /* What the admin port reads (relay_status.c). */
    admin_server_t *admin;
    char ready_reason[1024];
};

/* Past RELAY_RUNNING: nothing new is started. */
static inline bool relay_stopping(const struct relay *r)
{
    return r->phase >= RELAY_DRAINING;
}

/* A database that takes no new work: the process drains, or the database
 * was removed from --databases. */
static inline bool relay_db_stopping(const struct relay_db *db)
{
    return db->removing || relay_stopping(db->relay);
}

/* relay.c: wires the process to the loop (the HTTP clients, the timers and
 * signals) and opens the databases of cfg; nothing starts before
 * relay_db_start. */
void relay_attach(struct relay *r);
/* Closes every handle; the loop ends once they are closed. Once only. */
void relay_close(struct relay *r);
/* Jitter in [0, 1). */
double relay_random(struct relay *r);
/* How many rows db may claim now: the process's free budget, less what
 * the other databases with due work are owed of their fair share (relay.c,
 * "Fair share"). */
int relay_room(struct relay_db *db, bool count_held);
/* Capacity came free, or a database wants some: the databases waiting for
 * room claim, the most starved first. */
void relay_offer_room(struct relay *r);
/* Sends (or decides) one row of db's; leased_ns as relay_db.c's claim. */
void relay_start_delivery(struct relay_db *db, struct target *t, const struct claimed_row *row,
                          uint64_t leased_ns);
/* Shutdown goes on when nothing is left (relay.c); a removed database
 * closes once nothing of it is left. */
void relay_check_shutdown(struct relay *r);
/* --exit-when-idle: drains once every database is idle. */
void relay_check_idle_exit(struct relay *r);
/* A new database at the end of the list (not started). */
struct relay_db *relay_add_database(struct relay *r, const char *name, const char *conninfo);
/* A database's handles are all closed: it leaves the list and is freed. */
void relay_db_closed(struct relay_db *db);

/* relay_db.c: one database's scheduler. */
struct relay_db *relay_db_new(struct relay *r, const char *name, const char *conninfo);
void relay_db_start(struct relay_db *db);
void relay_db_maybe_claim(struct relay_db *db);
void relay_db_flush(struct relay_db *db);
void relay_db_send_releases(struct relay_db *db);
/* Buffers one outcome for the next record statement (the buffer takes over
 * its error and body), and counts it. t is NULL for a row of a target this
 * relay does not know. */
void relay_db_buffer_outcome(struct relay_db *db, struct target *t,
                             const struct pending_outcome *o);
/* Outcomes whose bodies hold delivery slots (record_slots_held). */
int relay_db_slots_held(const struct relay_db *db);
/* Deliveries, outcomes or give-backs not yet written. */
bool relay_db_has_work(const struct relay_db *db);
/* Nothing of db's is on the wire or waiting: it may say goodbye. */
bool relay_db_quiet(const struct relay_db *db);
/* The maintenance tick: leases, records, give-backs, targets, heartbeat. */
void relay_db_maintain(struct relay_db *db, uint64_t now);
/* Sends the goodbye to outbox.relays (once); then closes db. */
void relay_db_say_goodbye(struct relay_db *db);
/* Closes db's connections and timer; relay_db_closed follows. */
void relay_db_close(struct relay_db *db);
void relay_db_free(struct relay_db *db);

/* relay_status.c: the statement and histograms it owns. */
void relay_init_status(struct relay_db *db);
/* Opens the admin port when --admin-listen names one; false (logged) when
 * it cannot listen. */
bool relay_start_admin(struct relay *r);
/* The live counts of /metrics, at most every FLOW_LIVE_COUNTS_EVERY_MS
 * (longer while a count takes long: flow_live_counts_interval_ms), only
 * while the admin port is open. */
void relay_refresh_live_counts(struct relay_db *db);
/* The idle flag again every HEARTBEAT_EVERY_MS (now is loop time), unless
 * a change of it is on the wire: outbox.relays forgets relays silent for a
 * day. */
void relay_heartbeat(struct relay_db *db, uint64_t now);
/* The log line of one concluded attempt or status check. */
void relay_log_attempt(const struct delivery *d, enum attempt_class cls, const struct decision *dec,
                       const struct delivery_report *report);
/* The closing log line: what this relay did in its life, per database. */
void relay_log_totals(const struct relay_db *db);

#endif
