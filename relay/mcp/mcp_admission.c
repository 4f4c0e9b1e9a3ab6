/*
 * mcp_admission.c — who may use the front door's memory and database, and
 * how much (what it owns: mcp_admission.h).
 *
 * WHY IT IS SHAPED SO
 * The front door is one process under a memory limit (deploy/ ships 64
 * MiB), shared by every client, with a few database connections. Before
 * this file a stranger could take it down: a body was parsed before its
 * token was known (a parsed 1 MB body takes 10-80 MB in jansson), 30 such
 * bodies with a made-up token took half a gigabyte, and every request of
 * every client went straight onto the database connections' queues, so one
 * client with 60 calls in flight made another's wait behind all of them.
 *
 * DESIGN
 * 1. The verdict comes first. A token's SHA-256 is looked up in a small
 *    cache (ADM_CACHE_SIZE entries, kept ADM_VERDICT_MS, good and bad
 *    alike) when the request's head is read, before its body. A token the
 *    cache does not know is asked about alone (outbox.mcp_tool with an
 *    empty tool: a row names the client, no row is a stranger); every
 *    request with that token waits for the one question, with its body
 *    unread. A stranger's body is never read, a wrong token costs the
 *    database one statement per ADM_VERDICT_MS, and at most ADM_MAX_ASKING
 *    unknown tokens are asked about at once (past it: 503). The cache is an
 *    admission hint only: every outbox.mcp_* statement still authenticates
 *    the hash itself, so a revoked token is refused by the database at once.
 * 2. Memory is charged before it is spent: a body being read its length, a
 *    body about to be parsed what jansson will take for it (estimated from
 *    one pass over its bytes, adm_parse_estimate: heap per value, measured),
 *    a call that waits for its outcome only what the wait keeps (its
 *    arguments as sent; the parsed tree and the body are dropped when its
 *    statement is queued). Charges are per client and in total; past a
 *    client's share: 429, past the total: 503, both with Retry-After; a
 *    request that alone needs more than a client's share: 413. Requests in
 *    flight are capped per client too (waiting calls included).
 * 3. A fair queue in front of the database: statements wait in their
 *    client's own FIFO, and as a connection has room (ADM_PG_DEPTH
 *    statement on it) the clients are served round robin, one statement
 *    each. The token questions are one more "client". A client with 60
 *    calls queued delays another's next statement by at most one round.
 * 4. Memory goes back after a burst: once the charges fall below an eighth
 *    of their peak since the last time (and that peak passed
 *    ADM_TRIM_MIN_BYTES), malloc_trim runs ADM_TRIM_AFTER_MS later. glibc
 *    keeps freed heap otherwise, and a pod would look like it leaks.
 *
 * 5. Calls that wait together are enqueued together (issue 40): the
 *    enqueue statement at the head of the ring takes with it the enqueues
 *    at the heads of the next clients in the ring (round robin still: one
 *    per client per round, up to ADM_BATCH_MAX) as one batch statement
 *    (adm_set_batch: outbox.mcp_calls), one transaction. What a call costs
 *    the database was mostly its own transaction (a commit's WAL flush,
 *    plpgsql's expressions set up anew): a batch of 16 cost a quarter of 16
 *    alone. Calls wait together when they arrive in the same turn of the
 *    loop: an enqueue is not sent from adm_query but after the turn's
 *    callbacks (the check handle; the idle handle turn_end keeps the loop
 *    from sleeping first when it was queued after them), with every
 *    enqueue queued by then. Before, a batch formed only while every
 *    connection was busy, so the quieter the machine, the more calls went
 *    alone and the more each cost. A call that arrived alone goes alone,
 *    later by what is left of its turn only. A batch is all or nothing:
 *    when it fails, each of its calls is queued again at the head of its
 *    client's line, to go alone (an error is then its own, and nothing of
 *    the batch was committed; sending a call again is safe in any case, as
 *    the enqueue is keyed). A caller cannot tell a batched answer from one
 *    alone. In the database (0049) the batch's plainly new calls are one
 *    INSERT, the others mcp_call each.
 *
 * Left out on purpose: per-address limits (clients behind one proxy share
 * an address; the connection cap of http_server.c evicts silent sockets
 * first instead), and cancelling a queued statement of a call whose
 * client went away (its callback frees it; the client's calls cap bounds
 * them).
 */
#include "mcp/mcp_admission.h"

#include "lib/json_text.h"
#include "lib/strbuf.h"
#include "lib/xalloc.h"

#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#define ADM_VERDICT_MS 5000
#define ADM_CACHE_SIZE 1024
#define ADM_CACHE_PROBE 16
#define ADM_MAX_ASKING 64
#define ADM_PG_DEPTH 1
#define ADM_BATCH_MAX 32
#define ADM_TRIM_AFTER_MS 200
#define ADM_TRIM_MIN_BYTES (1u << 20)

struct adm_job {
    struct adm_job *next;
    admission_t *a;
    const char *statement;
    int n;
    char **values;
    adm_result_cb cb;
    void *data;
    pg_conn_t *pg;
    struct adm_client *client; /* whose line it waits in (queued again after a failed batch) */
    bool solo;                 /* sent alone even where it could be batched */
};

/* A batch on the wire: its jobs, answered by their rows' ord (1-based). */
struct adm_batch {
    admission_t *a;
    int n;
    struct adm_job *jobs[ADM_BATCH_MAX];
};

struct adm_client {
    struct adm_client *next;      /* in a->clients */
    struct adm_client *ring_next; /* in the round robin while it has statements queued */
    bool in_ring;
    struct adm_job *head, *tail;
    size_t charged;
    int calls;
    char name[];
};

struct verdict_entry {
    admission_t *a;
    char token_hash[68];
    char as_hash[68]; /* what statements authenticate with: token_hash, or a JWT's client's */
    uint64_t cap_ms;  /* a JWT's: the verdict is kept no later than this (its exp) */
    enum adm_verdict verdict;
    bool asking;
    struct adm_client *client;
    uint64_t expires_ms; /* 0 and not asking: empty */
    struct adm_waiter *waiters;
};

struct admission {
    uv_loop_t *loop;
    struct adm_limits limits;
    pg_conn_t **pg;
    int pg_count;
    struct verdict_entry cache[ADM_CACHE_SIZE];
    int asking;
    struct adm_client *clients;
    struct adm_client *questions; /* the token questions' queue */
    struct adm_client *ring_head, *ring_tail;
    bool pumping, pump_again, closing;
    size_t queued;
    size_t charged, peak, peak_since_trim;
    uv_timer_t trim_timer;
    uv_check_t check;   /* after every loop turn: statements queued meet connections freed
                         * by a result that did not come through here (the batched look-up),
                         * and the turn's enqueues go (5.) */
    uv_idle_t turn_end; /* active while an enqueue waits for its turn's end: the loop
                         * does not sleep before it goes */
    int open_handles;
    uint64_t auth_questions, verdict_hits, trims;
    const char *batch_single, *batch_statement; /* adm_set_batch */
    int batch_nparams;
    uint64_t batches, batched_calls, batch_failures;
    void (*on_closed)(void *data);
    void *closed_data;
};

/* ---------------------------------------------------------------- clients */

static struct adm_client *client_new(admission_t *a, const char *name)
{
    size_t len = strlen(name);
    struct adm_client *c = xcalloc(1, sizeof(*c) + len + 1);
    memcpy(c->name, name, len + 1);
    c->next = a->clients;
    a->clients = c;
    return c;
}

/* Clients are the rows of outbox.mcp_clients this front door has seen: few,
 * and kept until it stops. */
struct adm_client *adm_client_get(admission_t *a, const char *name)
{
    for (struct adm_client *c = a->clients; c; c = c->next)
        if (c != a->questions && !strcmp(c->name, name))
            return c;
    return client_new(a, name);
}

const char *adm_client_name(const struct adm_client *c)
{
    return c->name;
}

/* ---------------------------------------------------------------- memory */

static void on_trim_timer(uv_timer_t *timer)
{
    admission_t *a = timer->data;
    malloc_trim(0);
    a->trims++;
    a->peak_since_trim = a->charged;
}

enum adm_refusal adm_charge(admission_t *a, struct adm_client *c, size_t bytes, size_t held,
                            bool body)
{
    size_t share = a->limits.client_memory_bytes;
    if (held + bytes > share || held + bytes > a->limits.memory_bytes)
        return ADM_TOO_LARGE;
    if (c->charged + bytes > (body ? share / 2 : share))
        return ADM_CLIENT_FULL;
    if (a->charged + bytes > a->limits.memory_bytes)
        return ADM_SERVER_FULL;
    c->charged += bytes;
    a->charged += bytes;
    if (a->charged > a->peak)
        a->peak = a->charged;
    if (a->charged > a->peak_since_trim)
        a->peak_since_trim = a->charged;
    return ADM_OK;
}

void adm_uncharge(admission_t *a, struct adm_client *c, size_t bytes)
{
    if (bytes > c->charged || bytes > a->charged)
        abort(); /* a charge given back twice */
    c->charged -= bytes;
    a->charged -= bytes;
    if (!a->closing && a->peak_since_trim >= ADM_TRIM_MIN_BYTES &&
        a->charged < a->peak_since_trim / 8 && !uv_is_active((uv_handle_t *)&a->trim_timer))
        uv_timer_start(&a->trim_timer, on_trim_timer, ADM_TRIM_AFTER_MS, 0);
}

enum adm_refusal adm_call_begin(admission_t *a, struct adm_client *c)
{
    if (c->calls >= a->limits.client_calls)
        return ADM_CLIENT_FULL;
    c->calls++;
    return ADM_OK;
}

void adm_call_end(admission_t *a, struct adm_client *c)
{
    c->calls--;
}

/*
 * Heap per value of a parsed body, measured with jansson 2.14 (mallinfo2
 * before and after json_loadb of 1 MB bodies): [1,1,…] 40 bytes a value,
 * [[],[],…] 70, [{},{},…] 118, {"k":1,…} 44 a member, ["",…] 46. Charged
 * here a little above: 256 an object, 112 an array, 64 a string, 48 every
 * other value or member (a ',' or ':'), and the body's own bytes (strings
 * are copied).
 */
size_t adm_parse_estimate(const char *body, size_t len)
{
    size_t objects = 0, arrays = 0, strings = 0, separators = 0;
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        char ch = body[i];
        if (in_string) {
            if (ch == '\\')
                i++;
            else if (ch == '"')
                in_string = false;
            continue;
        }
        switch (ch) {
        case '"':
            in_string = true;
            strings++;
            break;
        case '{':
            objects++;
            break;
        case '[':
            arrays++;
            break;
        case ',':
        case ':':
            separators++;
            break;
        default:
            break;
        }
    }
    return len + 256 * objects + 112 * arrays + 64 * strings + 48 * (separators + 1);
}

void adm_request_slim(struct mcp_request *req)
{
    if (req->root == NULL || (req->params == NULL && req->meta == NULL))
        return;
    json_t *root = json_object();
    if (req->id)
        json_object_set(root, "id", req->id);
    if (req->method)
        json_object_set_new(root, "method", json_string(req->method));
    if (req->version && req->version != req->version_buf)
        json_object_set_new(root, "version", json_string(req->version));
    /* The tree belongs to req->doc (with the exact text of its numbers):
     * it goes whole; the slim root is the request's own from now on. */
    json_text_decref(req->doc);
    req->doc = NULL;
    free(req->arguments_text);
    req->arguments_text = NULL;
    req->root = root;
    req->id = json_object_get(root, "id");
    req->method = json_string_value(json_object_get(root, "method"));
    if (req->version && req->version != req->version_buf)
        req->version = json_string_value(json_object_get(root, "version"));
    req->params = req->meta = NULL;
}

/* ---------------------------------------------------------------- the fair queue */

static void job_free(struct adm_job *job)
{
    for (int i = 0; i < job->n; i++)
        free(job->values[i]);
    free(job->values);
    free(job);
}

static void on_job_done(void *data, PGresult *res, const char *error)
{
    struct adm_job *job = data;
    admission_t *a = job->a;
    job->cb(job->data, job->pg, res, error);
    job_free(job); /* its values were freed when it was sent */
    adm_pump(a);
}

static struct adm_job *client_pop(struct adm_client *c)
{
    struct adm_job *job = c->head;
    if (job) {
        c->head = job->next;
        if (c->head == NULL)
            c->tail = NULL;
    }
    return job;
}

static void ring_push(admission_t *a, struct adm_client *c)
{
    c->in_ring = true;
    c->ring_next = NULL;
    if (a->ring_tail)
        a->ring_tail->ring_next = c;
    else
        a->ring_head = c;
    a->ring_tail = c;
}

static struct adm_client *ring_pop(admission_t *a)
{
    struct adm_client *c = a->ring_head;
    if (c) {
        a->ring_head = c->ring_next;
        if (a->ring_head == NULL)
            a->ring_tail = NULL;
        c->in_ring = false;
    }
    return c;
}

static pg_conn_t *connection_with_room(admission_t *a, int depth)
{
    pg_conn_t *best = NULL;
    int best_queued = depth;
    for (int i = 0; i < a->pg_count; i++) {
        if (!pg_conn_ready(a->pg[i]))
            continue;
        int queued = pg_conn_queued(a->pg[i]);
        if (queued < best_queued) {
            best = a->pg[i];
            best_queued = queued;
        }
    }
    return best;
}

pg_conn_t *adm_least_busy(admission_t *a)
{
    return connection_with_room(a, 1 << 30);
}

/* Every queued statement fails (no connection is ready, or closing). */
static void fail_queued(admission_t *a, const char *why)
{
    struct adm_client *c;
    while ((c = ring_pop(a)) != NULL) {
        struct adm_job *job;
        while ((job = client_pop(c)) != NULL) {
            a->queued--;
            job->cb(job->data, NULL, NULL, why);
            job_free(job);
        }
    }
}

void adm_set_batch(admission_t *a, const char *single, const char *batch, int nparams)
{
    a->batch_single = single;
    a->batch_statement = batch;
    a->batch_nparams = nparams;
}

static bool batchable(const admission_t *a, const struct adm_job *job)
{
    return a->batch_statement && !job->solo && job->n == a->batch_nparams &&
           strcmp(job->statement, a->batch_single) == 0;
}

/* A result of one row, row of res, for a job's callback (which reads row 0). */
static PGresult *row_result(const PGresult *res, int row)
{
    PGresult *one = PQcopyResult(res, PG_COPYRES_ATTRS);
    if (one == NULL)
        abort();
    for (int f = 0; f < PQnfields(res); f++) {
        bool null = PQgetisnull(res, row, f);
        if (!PQsetvalue(one, 0, f, null ? NULL : PQgetvalue(res, row, f),
                        null ? -1 : PQgetlength(res, row, f)))
            abort();
    }
    return one;
}

/* Back at the head of its client's line, to go alone. */
static void requeue_solo(admission_t *a, struct adm_job *job)
{
    struct adm_client *c = job->client;
    job->solo = true;
    job->pg = NULL;
    job->next = c->head;
    c->head = job;
    if (c->tail == NULL)
        c->tail = job;
    a->queued++;
    if (!c->in_ring)
        ring_push(a, c);
}

static void on_batch_done(void *data, PGresult *res, const char *error)
{
    struct adm_batch *b = data;
    admission_t *a = b->a;
    if (error) {
        a->batch_failures++;
        /* nothing of it was committed: each goes alone (in reverse, so a
         * client's calls keep their order at the head of its line) */
        for (int i = b->n - 1; i >= 0; i--) {
            if (a->closing) {
                b->jobs[i]->cb(b->jobs[i]->data, NULL, NULL, error);
                job_free(b->jobs[i]);
            } else {
                requeue_solo(a, b->jobs[i]);
            }
        }
    } else {
        int ord_col = PQnfields(res) - 1; /* ord is the last column */
        for (int r = 0; r < PQntuples(res); r++) {
            long ord = ord_col >= 0 ? strtol(PQgetvalue(res, r, ord_col), NULL, 10) : 0;
            if (ord < 1 || ord > b->n || b->jobs[ord - 1] == NULL)
                continue;
            struct adm_job *job = b->jobs[ord - 1];
            b->jobs[ord - 1] = NULL;
            PGresult *one = row_result(res, r);
            job->cb(job->data, job->pg, one, NULL);
            PQclear(one);
            job_free(job);
        }
        for (int i = 0; i < b->n; i++)
            if (b->jobs[i]) { /* no row for it: the call may have been recorded */
                b->jobs[i]->cb(b->jobs[i]->data, NULL, NULL, "the batch had no answer for it");
                job_free(b->jobs[i]);
            }
    }
    free(b);
    adm_pump(a);
}

/* Sends jobs[0..n) as one statement: parameter i of the batch is the array
 * of every job's parameter i. The jobs' values are kept (a failed batch
 * sends them again, alone). */
static void send_batch(admission_t *a, pg_conn_t *pg, struct adm_job **jobs, int n)
{
    struct adm_batch *b = xcalloc(1, sizeof(*b));
    b->a = a;
    b->n = n;
    int np = a->batch_nparams;
    struct strbuf *arrays = xcalloc((size_t)np, sizeof(*arrays));
    const char **params = xcalloc((size_t)np, sizeof(*params));
    for (int p = 0; p < np; p++) {
        pgarray_begin(&arrays[p]);
        for (int i = 0; i < n; i++) {
            const char *v = jobs[i]->values[p];
            if (v)
                pgarray_item_text(&arrays[p], v, strlen(v));
            else
                pgarray_item_null(&arrays[p]);
        }
        pgarray_end(&arrays[p]);
        params[p] = arrays[p].data;
    }
    for (int i = 0; i < n; i++) {
        jobs[i]->pg = pg;
        b->jobs[i] = jobs[i];
    }
    a->batches++;
    a->batched_calls += (uint64_t)n;
    if (!pg_query(pg, a->batch_statement, np, params, on_batch_done, b)) {
        for (int i = 0; i < n; i++) {
            jobs[i]->cb(jobs[i]->data, NULL, NULL, "the database connection is not ready");
            job_free(jobs[i]);
        }
        free(b);
    }
    for (int p = 0; p < np; p++)
        strbuf_free(&arrays[p]);
    free(arrays);
    free(params);
}

void adm_pump(admission_t *a)
{
    if (a->pumping) {
        a->pump_again = true; /* a callback queued more: the outer loop goes on */
        return;
    }
    a->pumping = true;
    do {
        a->pump_again = false;
        while (a->ring_head) {
            pg_conn_t *pg = connection_with_room(a, ADM_PG_DEPTH);
            if (pg == NULL)
                break;
            struct adm_client *c = ring_pop(a);
            struct adm_job *job = client_pop(c);
            if (c->head)
                ring_push(a, c); /* one statement per client per round */
            a->queued--;
            if (batchable(a, job)) {
                struct adm_job *jobs[ADM_BATCH_MAX];
                int n = 0;
                jobs[n++] = job;
                while (n < ADM_BATCH_MAX && a->ring_head && batchable(a, a->ring_head->head)) {
                    struct adm_client *next = ring_pop(a);
                    jobs[n++] = client_pop(next);
                    if (next->head)
                        ring_push(a, next);
                    a->queued--;
                }
                if (n > 1) {
                    send_batch(a, pg, jobs, n);
                    continue;
                }
            }
            job->pg = pg;
            /* pg_query copies the values, and may call back (and free the
             * job) before it returns: they are freed from here. */
            char **values = job->values;
            int n = job->n;
            job->values = NULL;
            job->n = 0;
            if (!pg_query(pg, job->statement, n, (const char *const *)values, on_job_done, job)) {
                job->cb(job->data, NULL, NULL, "the database connection is not ready");
                job_free(job);
            }
            for (int i = 0; i < n; i++)
                free(values[i]);
            free(values);
        }
        if (a->ring_head && adm_least_busy(a) == NULL)
            fail_queued(a, "the database is not reachable");
    } while (a->pump_again);
    a->pumping = false;
}

/* An enqueue was queued after the turn's check (a close callback): the
 * next turn does not sleep before it goes. */
static void on_turn_end(uv_idle_t *idle)
{
    admission_t *a = idle->data;
    uv_idle_stop(idle);
    if (a->ring_head)
        adm_pump(a);
}

bool adm_query(admission_t *a, struct adm_client *c, const char *statement, int n,
               const char *const *values, adm_result_cb cb, void *data, void (*copied)(void *data))
{
    if (a->closing || adm_least_busy(a) == NULL)
        return false;
    if (c == NULL)
        c = a->questions;
    struct adm_job *job = xcalloc(1, sizeof(*job));
    job->a = a;
    job->statement = statement;
    job->n = n;
    job->values = xcalloc((size_t)(n > 0 ? n : 1), sizeof(char *));
    for (int i = 0; i < n; i++)
        job->values[i] = values[i] ? xstrdup(values[i]) : NULL;
    job->cb = cb;
    job->data = data;
    job->client = c;
    if (c->tail)
        c->tail->next = job;
    else
        c->head = job;
    c->tail = job;
    a->queued++;
    if (!c->in_ring)
        ring_push(a, c);
    if (copied)
        copied(data);
    if (batchable(a, job)) { /* with the rest of this turn's enqueues (5.) */
        if (!uv_is_active((uv_handle_t *)&a->turn_end))
            uv_idle_start(&a->turn_end, on_turn_end);
        return true;
    }
    adm_pump(a);
    return true;
}

/* ---------------------------------------------------------------- verdicts */

static size_t cache_index(const char *token_hash)
{
    /* "\x" then hex of a SHA-256: the next four digits are uniform */
    size_t h = 0;
    for (int i = 2; i < 6 && token_hash[i]; i++)
        h = h * 16 + (size_t)(token_hash[i] & 0x0f) + (token_hash[i] > '9' ? 9 : 0);
    return h % ADM_CACHE_SIZE;
}

static struct verdict_entry *cache_find(admission_t *a, const char *token_hash)
{
    uint64_t now = uv_now(a->loop);
    size_t at = cache_index(token_hash);
    for (int i = 0; i < ADM_CACHE_PROBE; i++) {
        struct verdict_entry *e = &a->cache[(at + (size_t)i) % ADM_CACHE_SIZE];
        if ((e->asking || e->expires_ms > now) && !strcmp(e->token_hash, token_hash))
            return e;
    }
    return NULL;
}

/* A slot for a new entry: an empty or expired one in the probe window, else
 * the one that expires first (never one being asked about). */
static struct verdict_entry *cache_slot(admission_t *a, const char *token_hash)
{
    uint64_t now = uv_now(a->loop);
    size_t at = cache_index(token_hash);
    struct verdict_entry *best = NULL;
    for (int i = 0; i < ADM_CACHE_PROBE; i++) {
        struct verdict_entry *e = &a->cache[(at + (size_t)i) % ADM_CACHE_SIZE];
        if (e->asking)
            continue;
        if (e->expires_ms <= now)
            return e;
        if (best == NULL || e->expires_ms < best->expires_ms)
            best = e;
    }
    return best;
}

enum adm_verdict adm_verdict(admission_t *a, const char *token_hash, struct adm_client **client,
                             char as_hash[68])
{
    struct verdict_entry *e = cache_find(a, token_hash);
    if (e == NULL || e->asking)
        return ADM_UNKNOWN;
    a->verdict_hits++;
    if (e->verdict == ADM_GOOD) {
        *client = e->client;
        if (as_hash)
            memcpy(as_hash, e->as_hash, 68);
    }
    return e->verdict;
}

static void on_auth_done(void *data, pg_conn_t *pg, PGresult *res, const char *error)
{
    struct verdict_entry *e = data;
    admission_t *a = e->a;
    e->client = NULL;
    e->asking = false;
    a->asking--;
    e->verdict = ADM_UNKNOWN;
    e->expires_ms = 0;
    if (error == NULL) {
        if (PQntuples(res) > 0 && (PQnfields(res) == 1 || PQgetlength(res, 0, 1) == 66)) {
            e->verdict = ADM_GOOD;
            e->client = adm_client_get(a, PQgetvalue(res, 0, 0));
            if (PQnfields(res) > 1) /* a JWT's client: its row's hash ("\x" + 64 hex digits) */
                snprintf(e->as_hash, sizeof(e->as_hash), "%s", PQgetvalue(res, 0, 1));
        } else {
            e->verdict = ADM_BAD;
        }
        e->expires_ms = uv_now(a->loop) + ADM_VERDICT_MS;
        if (e->cap_ms && e->cap_ms < e->expires_ms)
            e->expires_ms = e->cap_ms;
    }
    /* The callbacks may ask about other tokens: take what they need first. */
    enum adm_verdict verdict = e->verdict;
    struct adm_client *client = e->client;
    struct adm_waiter *waiters = e->waiters;
    e->waiters = NULL;
    for (struct adm_waiter *w = waiters; w; w = w->next) {
        w->entry = NULL; /* a callback may cancel another waiter: nothing to unlink */
        memcpy(w->as_hash, e->as_hash, sizeof(w->as_hash));
    }
    while (waiters) {
        struct adm_waiter *w = waiters;
        waiters = w->next;
        w->on_verdict(w, verdict, client);
    }
}

bool adm_ask(admission_t *a, const char *token_hash, struct adm_waiter *w)
{
    return adm_ask_client(a, token_hash, NULL, 0, w);
}

bool adm_ask_client(admission_t *a, const char *token_hash, const char *client, uint64_t cap_ms,
                    struct adm_waiter *w)
{
    struct verdict_entry *e = cache_find(a, token_hash);
    if (e == NULL || !e->asking) {
        if (a->asking >= ADM_MAX_ASKING)
            return false;
        e = cache_slot(a, token_hash);
        if (e == NULL)
            return false;
        memset(e, 0, sizeof(*e));
        snprintf(e->token_hash, sizeof(e->token_hash), "%s", token_hash);
        snprintf(e->as_hash, sizeof(e->as_hash), "%s", token_hash);
        e->cap_ms = cap_ms;
        e->a = a;
        e->asking = true;
        a->asking++;
        a->auth_questions++;
        const char *params[1] = {client ? client : e->token_hash};
        if (!adm_query(a, NULL, client ? "mcp_oauth_client" : "mcp_auth", 1, params, on_auth_done,
                       e, NULL)) {
            a->asking--;
            memset(e, 0, sizeof(*e));
            return false;
        }
        if (!e->asking) { /* answered at once (the send failed): w was not waiting yet */
            memcpy(w->as_hash, e->as_hash, sizeof(w->as_hash));
            w->on_verdict(w, e->verdict, e->client);
            return true;
        }
    }
    w->entry = e;
    w->prev = NULL;
    w->next = e->waiters;
    if (e->waiters)
        e->waiters->prev = w;
    e->waiters = w;
    return true;
}

void adm_waiter_cancel(admission_t *a, struct adm_waiter *w)
{
    struct verdict_entry *e = w->entry;
    if (e == NULL)
        return;
    if (w->prev)
        w->prev->next = w->next;
    else
        e->waiters = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->entry = NULL;
}

/* ---------------------------------------------------------------- the rest */

bool adm_rate_allow(admission_t *a, struct adm_rate *r, uint64_t *suppressed)
{
    uint64_t now = uv_now(a->loop);
    if (r->window_ms == 0 || now >= r->window_ms + 1000) {
        *suppressed = r->suppressed;
        r->suppressed = 0;
        r->window_ms = now + 1; /* 0 means never */
        return true;
    }
    r->suppressed++;
    return false;
}

bool adm_rate_flush(admission_t *a, struct adm_rate *r, uint64_t *suppressed)
{
    if (r->suppressed == 0 || uv_now(a->loop) < r->window_ms + 1000)
        return false;
    *suppressed = r->suppressed;
    r->suppressed = 0;
    return true;
}

void adm_stats(const admission_t *a, struct adm_stats *out)
{
    out->charged = a->charged;
    out->peak = a->peak;
    out->queued = a->queued;
    out->auth_questions = a->auth_questions;
    out->batches = a->batches;
    out->batched_calls = a->batched_calls;
    out->batch_failures = a->batch_failures;
    out->verdict_hits = a->verdict_hits;
    out->trims = a->trims;
}

const struct adm_client *adm_first_client(const admission_t *a)
{
    const struct adm_client *c = a->clients;
    return c == a->questions ? c->next : c;
}

const struct adm_client *adm_next_client(const admission_t *a, const struct adm_client *c)
{
    c = c->next;
    return c == a->questions ? c->next : c;
}

int adm_client_calls(const struct adm_client *c)
{
    return c->calls;
}

size_t adm_client_charged(const struct adm_client *c)
{
    return c->charged;
}

static void on_check(uv_check_t *check)
{
    admission_t *a = check->data;
    uv_idle_stop(&a->turn_end);
    if (a->ring_head)
        adm_pump(a);
}

admission_t *adm_new(uv_loop_t *loop, const struct adm_limits *limits, pg_conn_t **pg, int pg_count)
{
    admission_t *a = xcalloc(1, sizeof(*a));
    a->loop = loop;
    a->limits = *limits;
    a->pg = pg;
    a->pg_count = pg_count;
    a->questions = client_new(a, "");
    uv_timer_init(loop, &a->trim_timer);
    a->trim_timer.data = a;
    uv_check_init(loop, &a->check);
    a->check.data = a;
    uv_check_start(&a->check, on_check);
    uv_idle_init(loop, &a->turn_end);
    a->turn_end.data = a;
    a->open_handles = 3;
    return a;
}

static void on_handle_closed(uv_handle_t *handle)
{
    admission_t *a = handle->data;
    if (--a->open_handles > 0)
        return;
    void (*on_closed)(void *) = a->on_closed;
    void *data = a->closed_data;
    while (a->clients) {
        struct adm_client *c = a->clients;
        a->clients = c->next;
        free(c);
    }
    free(a);
    if (on_closed)
        on_closed(data);
}

void adm_close(admission_t *a, void (*on_closed)(void *data), void *data)
{
    a->closing = true;
    fail_queued(a, "shutting down");
    a->on_closed = on_closed;
    a->closed_data = data;
    uv_timer_stop(&a->trim_timer);
    uv_close((uv_handle_t *)&a->trim_timer, on_handle_closed);
    uv_close((uv_handle_t *)&a->check, on_handle_closed);
    uv_close((uv_handle_t *)&a->turn_end, on_handle_closed);
}
