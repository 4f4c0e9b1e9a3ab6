/*
 * tests/model/protocol.pml — the delivery protocol of outbox-relay, for SPIN.
 *
 * One intent (one idempotency key), two relays, one target. Every step that
 * touches the database is one atomic block, as one SQL statement is one
 * transaction; the comment on each names the SQL function (file, function)
 * or the relay code (relay/relay.c, relay/outcome.c) it stands for.
 * tests/model/README.md lists the correspondence and what is abstracted away;
 * tests/model/run.sh runs the checks.
 *
 * The environment is hostile within budgets:
 *   - a relay may stop at any step (crash, or shutdown releasing a row it
 *     claimed but never sent); a new incarnation, with a new relay id, starts
 *     at once. What it had on the wire stays there: a request may still reach
 *     the target, a record statement may still be applied (or never arrive).
 *   - a lease expires by itself whenever its holder is dead or idle, and, up to
 *     SLOWS times, while its holder is alive and busy (a partition from the
 *     database, a slow record connection): another relay then takes the row.
 *   - record statements are applied in any order, at any later time (a slow
 *     record connection): an outcome may land after the lease expired and
 *     another relay took the row. (The relay sends its records in order, one
 *     statement at a time; any order is a superset of that.)
 *   - the network loses requests and responses; the target executes, refuses
 *     (4xx, 429) or fails (5xx) each request it receives; a request whose
 *     sender timed out or died may still arrive later.
 *   - a keyed target deduplicates until key_ttl passes (then it forgets).
 *   - the retry horizon (retry_for) may run out at any decision; max_attempts
 *     is MAXATT.
 *   - flow control (outbox.claim's gate, 0009) closes up to GATES times
 *     (default 0, see README.md), the status URL answers neither 200 nor 404
 *     up to INCONCLUSIVES times (default 0).
 *
 * Timing assumptions (the model has no clock; these are what the relay's
 * delays buy, see README.md "Timing assumptions"):
 *   T2  a request lives (travels, or runs at the target) for less than
 *       reconcile_delay_ms after it was sent, so a status URL is never asked
 *       while a request of the key is still in flight: in the model its
 *       answer waits until none is. -DNO_REQUEST_BOUND drops T2 (the status
 *       URL then tells what it knows at that instant).
 *   T3  a relay sends a claimed row before the lease of its claim expires.
 *       -DNO_SEND_DEADLINE drops T3 (a lease may expire between the claim and
 *       the send).
 *   T4  key_ttl outlasts every request: a key is not forgotten while a
 *       request carrying it is in flight (dropped with T2).
 *
 * Options: -DSAME_ID (a restarted relay keeps its id), -DTAKEOVER_0003
 * (take_over_expired before 0011), -DTARGET=0..3 (one target kind),
 * -DMAXATT, -DCRASHES, -DSLOWS, -DGATES, -DINCONCLUSIVES (the budgets),
 * -DPROPERTIES_ONLY (no assertions of the model's own).
 *
 * Seeded bugs (tests/model/run.sh expects each to be caught):
 *   SEEDED_BUG_NO_FENCE             outbox.record without the (lease_owner, attempts) fence
 *   SEEDED_BUG_TAKEOVER_NOT_AMBIGUOUS  on_taken_over decides as "not sent" (skips the ambiguous flag)
 *   SEEDED_BUG_FAIL_AFTER_AMBIGUOUS outcome_decide: a 4xx is "failed" even after an ambiguous attempt
 *   SEEDED_BUG_RESEND_UNCHECKED     on_claimed sends without outcome_resend_allowed
 *   SEEDED_BUG_RELEASE_SENT         shutdown releases a row whose request was sent
 *   SEEDED_BUG_STATUS_LEASE_NULL    outbox.claim_unknown only takes rows whose lease is NULL
 *                                   (drops "OR lease_expires_at < now()")
 */

#ifndef MAXATT
#define MAXATT 2   /* the retry horizon, in attempts (max_attempts; retry_for may end it sooner) */
#endif
#ifndef CRASHES
#define CRASHES 1  /* stops (crash or shutdown) per relay */
#endif
#ifndef SLOWS
#define SLOWS 1    /* leases that expire while their holder is alive and busy */
#endif
#ifndef GATES
#define GATES 0    /* times flow control closes the target's gate (see README: adds states, no behaviour) */
#endif
#ifndef INCONCLUSIVES
#define INCONCLUSIVES 0  /* status URL answers neither 200 nor 404 (see README: adds states, no behaviour) */
#endif
#define NB (2 * (1 + SLOWS + CRASHES))  /* record statements on the wire at once (asserted) */
#define NIDS (3 + 2 * CRASHES)    /* relay ids: 0 = NULL, 1 + r + 2 * incarnation */

/* outbox.intent_state (0001_tables.sql); awaiting_approval and cancelled are
 * out of scope (the relay never reads or writes them) */
#define PENDING   0
#define INFLIGHT  1
#define UNKNOWN   2
#define SUCCEEDED 3
#define FAILED    4

/* outbox.attempt_class, as relay/outcome.h */
#define C_NOT_SENT         0
#define C_AMBIGUOUS        1
#define C_SUCCEEDED        2
#define C_RETRY_LATER      3   /* 408, 425, 429; 409 from a keyed target */
#define C_PERMANENT        4   /* other 4xx, and 422 key_conflict: same decision */
#define C_REC_EXECUTED     5
#define C_REC_NOT_EXECUTED 6
#define C_REC_INCONCLUSIVE 7

/* what a relay is doing with the row (its struct delivery, or a claimed row
 * between on_claimed and the send) */
#define IDLE     0
#define CLAIMED  1
#define SENT     2
#define CHECKING 3

/* a relay's request to the target */
#define R_NONE   0
#define R_TRAVEL 1   /* sent, not (yet) at the target */
#define R_EXEC   2   /* the target acted (or had already: deduplicated); the response is on its way */
#define R_NOEXEC 3   /* the target did not act: refused (4xx, 429, 5xx), or never saw it (lost) */

/* ------------------------------------------------------------ the database row
 * outbox.intents (0001_tables.sql): state, attempts, lease_owner, ambiguous;
 * lease_expires_at only as "live" (> now()) or not (expired, or NULL). */
byte st = PENDING;
byte att = 0;
byte owner = 0;
bool live = false;
bool amb = false;
#ifdef SEEDED_BUG_STATUS_LEASE_NULL
bool lnull = true;  /* lease_expires_at IS NULL */
#define LEASE_SET   lnull = false
#define LEASE_CLEAR lnull = true
#else
#define LEASE_SET   skip
#define LEASE_CLEAR skip
#endif

/* ------------------------------------------------------------ the target */
bool keyed;          /* targets.key_header IS NOT NULL: it deduplicates */
bool has_status;     /* targets.status_url IS NOT NULL */
byte effects = 0;    /* times the target executed the intent (saturates at 2) */
bool forgot = false; /* key_ttl passed: the target forgot the key; the relay's key-age checks fail */
byte orphans = 0;    /* requests in flight whose sender no longer waits for them */
bool gate = true;    /* outbox.claim's gate (0009): target enabled, circuit not open */
byte gates = 0;

/* ------------------------------------------------------------ the relays */
byte inc[2];         /* incarnation of relay r: its id is 1 + r + 2 * inc[r] */
byte stops[2];
byte job[2];
byte jatt[2];        /* attempt number of the job (the claim's "attempt") */
bool jamb[2];        /* the row's ambiguous flag at claim time ("was_ambiguous") */
byte req[2];
byte slows = 0;
byte incons = 0;

/* relay ids (lease_owner, p_relay). By default each incarnation has an id of
 * its own (hostname:pid). -DSAME_ID: a new incarnation keeps its
 * predecessor's id, as a container restarted in the same pod does (same
 * hostname, pid 1); the model then remembers which incarnation holds the
 * lease (oinc), only to know whether the holder is dead. */
#define REL(o)   (((o) - 1) % 2)
#define SLOT(r)  (1 + (r) + 2 * inc[r])   /* the incarnation itself, whatever its id */
#ifdef SAME_ID
byte oinc;
#define ID(r)    (1 + (r))
#define SET_OWNER(r) owner = ID(r); oinc = inc[r]
#define CLEAR_OWNER  owner = 0; oinc = 0
#define DEAD(o)  ((o) != 0 && inc[REL(o)] != oinc)    /* o is the owner */
#define OSLOT    (1 + REL(owner) + 2 * oinc)           /* the owner's incarnation */
#else
#define ID(r)    (1 + (r) + 2 * inc[r])
#define SET_OWNER(r) owner = ID(r)
#define CLEAR_OWNER  owner = 0
#define DEAD(o)  ((o) != 0 && inc[REL(o)] != ((o) - 1) / 2)
#define OSLOT    owner
#endif
#define IN_FLIGHT_REQUESTS (req[0] == R_TRAVEL || req[1] == R_TRAVEL || orphans > 0)

/* ------------------------------------------------------------ record statements on the wire
 * One outcome per slot: p_relay, p_attempts[i], p_states[i], p_ambiguous[i],
 * and whether p_classes[i] = 'reconciled_not_executed'. Applied in any order. */
byte nb = 0;
byte bo[NB];         /* p_relay: the relay id */
byte bi[NB];         /* the incarnation that sent it (SLOT) */
byte ba[NB];
byte bs[NB];
bool bm[NB];
bool bc[NB];
byte nrec[NIDS];     /* records on the wire per incarnation (SLOT) */

/* outbox.record's fence (0003): lease_owner = p_relay AND attempts = p_attempts[i] */
#ifdef SEEDED_BUG_NO_FENCE
#define FENCE(k) true
#else
#define FENCE(k) (owner == bo[k] && att == ba[k])
#endif

/* outbox.claim_unknown: lease_expires_at IS NULL OR lease_expires_at < now() */
#ifdef SEEDED_BUG_STATUS_LEASE_NULL
#define LEASE_LAPSED lnull
#else
#define LEASE_LAPSED (!live)
#endif

/* migrations/0011_relay_hardening.sql take_over_expired(..., p_held): never
 * the caller's held rows (relay/relay.c relay_held_ids: delivering, or an
 * outcome of the row not yet recorded, whoever holds its lease now; the
 * take-over block runs only when the relay is not delivering it).
 * -DTAKEOVER_0003: the 0003 form, which took them. */
#ifdef TAKEOVER_0003
#define NOT_HELD(r) true
#else
#define NOT_HELD(r) (nrec[SLOT(r)] == 0)
#endif

/* T3: a lease does not expire between the claim and the send */
#ifdef NO_SEND_DEADLINE
#define SLOW_OK(h) true
#else
#define SLOW_OK(h) (job[h] != CLAIMED)
#endif

/* T2: the status URL is not asked while a request of the key is in flight
 * (it is asked reconcile_delay_ms after the row became unknown): in the
 * model the answer waits, or is "inconclusive" (a 5xx, a timeout) up to
 * INCONCLUSIVES times in all. Without T2 it tells what it knows now. */
#ifdef NO_REQUEST_BOUND
#define ANSWER_OK   true
#define ANSWER_TRUE true
#else
#define ANSWER_OK   (incons < INCONCLUSIVES || !IN_FLIGHT_REQUESTS)
#define ANSWER_TRUE (!IN_FLIGHT_REQUESTS)
#endif

/* T4: the key is not forgotten while a request carrying it is in flight */
#ifdef NO_REQUEST_BOUND
#define FORGET_OK true
#else
#define FORGET_OK (!IN_FLIGHT_REQUESTS)
#endif

/* Assertions of the model itself (the runs of seeded bugs leave them out, so
 * that what catches a bug is one of the properties). The bound of the record
 * bag is always asserted. */
#ifdef PROPERTIES_ONLY
#define INVARIANT(e) skip
#else
#define INVARIANT(e) assert(e)
#endif

#define SETTLED (st == SUCCEEDED || st == FAILED || (st == UNKNOWN && !has_status))

/* ------------------------------------------------------------ properties */
ltl no_second_effect            { [] (effects <= 1) }
ltl failed_only_if_not_executed { [] ((st == FAILED) -> (effects == 0)) }
ltl succeeded_only_if_executed  { [] ((st == SUCCEEDED) -> (effects > 0)) }
ltl never_lost                  { <> [] SETTLED }

/* relay/relay.c relay_push_outcome + relay_flush: the outcome goes on the record connection */
inline put(r_, a_, s_, m_, c_) {
    assert(nb < NB);
    bo[nb] = ID(r_); bi[nb] = SLOT(r_); ba[nb] = a_; bs[nb] = s_; bm[nb] = m_; bc[nb] = c_;
    nrec[SLOT(r_)]++;
    nb++
}

/* removes record slot k_, keeping the others in order (a canonical bag);
 * m_ is scratch */
inline unput(k_, m_) {
    nrec[bi[k_]]--;
    m_ = k_;
    do
    :: m_ + 1 < nb -> bo[m_] = bo[m_ + 1]; bi[m_] = bi[m_ + 1]; ba[m_] = ba[m_ + 1];
                      bs[m_] = bs[m_ + 1]; bm[m_] = bm[m_ + 1]; bc[m_] = bc[m_ + 1]; m_++
    :: else -> break
    od;
    nb--;
    bo[nb] = 0; bi[nb] = 0; ba[nb] = 0; bs[nb] = 0; bm[nb] = false; bc[nb] = false;
    m_ = 0
}

/* relay/outcome.c outcome_decide(cls, policy, progress) → (d_st, d_amb).
 * retry_within_horizon: attempt < MAXATT, and retry_for may have run out at
 * any time (the "true" branches). same_key_resend_safe: keyed and key_ttl not
 * passed. */
inline decide(cls, a, wamb) {
    d_amb = wamb || (cls == C_AMBIGUOUS);
    if
    :: cls == C_SUCCEEDED || cls == C_REC_EXECUTED -> d_st = SUCCEEDED
    :: cls == C_PERMANENT ->
#ifdef SEEDED_BUG_FAIL_AFTER_AMBIGUOUS
        d_st = FAILED
#else
        if
        :: d_amb -> d_st = UNKNOWN
        :: else -> d_st = FAILED
        fi
#endif
    :: cls == C_REC_NOT_EXECUTED ->
        d_amb = false;
        if
        :: a < MAXATT -> d_st = PENDING
        :: true -> d_st = FAILED
        fi
    :: cls == C_REC_INCONCLUSIVE -> d_amb = true; d_st = UNKNOWN
    :: cls == C_NOT_SENT || cls == C_RETRY_LATER || cls == C_AMBIGUOUS ->
        if
        :: a < MAXATT && (!d_amb || (keyed && !forgot)) -> d_st = PENDING
        :: true ->
            if
            :: d_amb -> d_st = UNKNOWN
            :: else -> d_st = FAILED
            fi
        fi
    fi
}

/* relay/relay.c relay_conclude: decide, buffer the outcome, forget the delivery */
inline conclude(r, cls, wamb) {
    decide(cls, jatt[r], wamb);
    printf("relay id %d: attempt %d class %d -> decides state %d, ambiguous %d\n", ID(r), jatt[r], cls, d_st, d_amb);
    put(r, jatt[r], d_st, d_amb, cls == C_REC_NOT_EXECUTED);
    job[r] = IDLE; jatt[r] = 0; jamb[r] = false; req[r] = R_NONE;
    d_st = 0; d_amb = false
}

/* the relay stops; a new incarnation starts with nothing in memory. Its
 * request, if travelling, stays in flight; its record statements on the wire
 * each either reach the database later or never do. */
inline restart(r) {
    printf("relay id %d STOPS\n", ID(r));
    stops[r]++;
    if
    :: req[r] == R_TRAVEL -> orphans++
    :: else -> skip
    fi;
    k = 0;
    do
    :: k < nb && bi[k] == SLOT(r) -> unput(k, m)    /* never reached the server */
    :: k < nb && bi[k] == SLOT(r) -> k++            /* may still be applied */
    :: k < nb && bi[k] != SLOT(r) -> k++
    :: k >= nb -> break
    od;
    k = 0;
    inc[r]++;
    job[r] = IDLE; jatt[r] = 0; jamb[r] = false; req[r] = R_NONE
}

proctype relay(byte r)
{
    byte d_st;
    bool d_amb;
    byte k, m;
end_loop:
    do
    /* migrations/0009_flow_control.sql outbox.claim (gated), as 0003: a
     * pending row → in_flight, attempts + 1, this relay's lease. Returns
     * attempt and ambiguous (relay/relay.c on_claimed). */
    :: atomic { job[r] == IDLE && st == PENDING && gate ->
        INVARIANT(att < MAXATT);   /* a row is pending only while an attempt is left */
        st = INFLIGHT; att++; SET_OWNER(r); live = true; LEASE_SET;
        jatt[r] = att; jamb[r] = amb; job[r] = CLAIMED;
        printf("relay id %d: outbox.claim: in_flight, attempt %d, ambiguous %d\n", ID(r), att, amb) }

    /* relay/relay.c on_claimed: outcome_resend_allowed (relay/outcome.c),
     * then relay_start_delivery. (Connect refused, class not_sent, decides
     * as a request the target refused, below.) */
    :: atomic { job[r] == CLAIMED ->
        if
#ifdef SEEDED_BUG_RESEND_UNCHECKED
        :: true ->
#else
        :: !jamb[r] || (keyed && !forgot) ->
#endif
            req[r] = R_TRAVEL; job[r] = SENT;
            printf("relay id %d: sends attempt %d\n", ID(r), jatt[r])
#ifndef SEEDED_BUG_RESEND_UNCHECKED
        :: else ->    /* not re-sent: unknown, class not_sent, ambiguous */
            printf("relay id %d: attempt %d not re-sent (resend not allowed)\n", ID(r), jatt[r]);
            put(r, jatt[r], UNKNOWN, true, false);
            job[r] = IDLE; jatt[r] = 0; jamb[r] = false
#endif
        fi }

    /* shutdown before sending: relay_release_later → migrations/0003_relay.sql
     * outbox.release, fenced by (lease_owner, attempts) */
    :: atomic { job[r] == CLAIMED && stops[r] < CRASHES ->
        printf("relay id %d: shutdown, outbox.release of attempt %d\n", ID(r), jatt[r]);
        if
        :: st == INFLIGHT && owner == ID(r) && att == jatt[r] ->
            st = PENDING; att--; CLEAR_OWNER; live = false; LEASE_CLEAR
        :: else -> skip
        fi;
        restart(r) }

#ifdef SEEDED_BUG_RELEASE_SENT
    /* the bug: shutdown gives back a row whose request went out */
    :: atomic { job[r] == SENT && stops[r] < CRASHES ->
        printf("relay id %d: shutdown, outbox.release of the SENT attempt %d (the bug)\n", ID(r), jatt[r]);
        if
        :: st == INFLIGHT && owner == ID(r) && att == jatt[r] ->
            st = PENDING; att--; CLEAR_OWNER; live = false; LEASE_CLEAR
        :: else -> skip
        fi;
        restart(r) }
#endif

    /* relay/relay.c relay_conclude after the transfer (outcome_classify):
     * timeout while the request travels (it may still arrive) */
    :: atomic { job[r] == SENT && req[r] == R_TRAVEL ->
        printf("relay id %d: attempt %d times out (the request is still in flight)\n", ID(r), jatt[r]);
        orphans++; req[r] = R_NONE; conclude(r, C_AMBIGUOUS, jamb[r]) }
    /* the target acted: 2xx, or the response is lost or a 5xx */
    :: atomic { job[r] == SENT && req[r] == R_EXEC ->
        if
        :: conclude(r, C_SUCCEEDED, jamb[r])
        :: conclude(r, C_AMBIGUOUS, jamb[r])
        fi }
    /* the target did not act: 4xx (and 422), 408/410/425/429, a 5xx, or the
     * request was lost on the way (timeout, reset) */
    :: atomic { job[r] == SENT && req[r] == R_NOEXEC ->
        if
        :: conclude(r, C_PERMANENT, jamb[r])
        :: conclude(r, C_RETRY_LATER, jamb[r])
        :: conclude(r, C_AMBIGUOUS, jamb[r])
        fi }

    /* migrations/0011_relay_hardening.sql outbox.take_over_expired (0003's,
     * plus p_held): an in_flight row whose lease expired, not held by this
     * relay, gets this relay's lease, attempts unchanged; then relay/relay.c
     * on_taken_over decides it as an ambiguous attempt. */
    :: atomic { job[r] == IDLE && st == INFLIGHT && !live && NOT_HELD(r) ->
        SET_OWNER(r); live = true; LEASE_SET;
        printf("relay id %d: outbox.take_over_expired, attempt %d, ambiguous %d\n", ID(r), att, amb);
#ifdef SEEDED_BUG_TAKEOVER_NOT_AMBIGUOUS
        decide(C_NOT_SENT, att, amb);
#else
        decide(C_AMBIGUOUS, att, amb);
#endif
        put(r, att, d_st, d_amb, false);
        d_st = 0; d_amb = false }

    /* migrations/0003_relay.sql outbox.claim_unknown: an unknown row of a
     * target with a status URL (and enabled), lease NULL or expired → this
     * relay's lease; state stays unknown. relay/relay.c on_unknown_claimed. */
    :: atomic { job[r] == IDLE && st == UNKNOWN && has_status && gate && LEASE_LAPSED ->
        SET_OWNER(r); live = true; LEASE_SET;
        jatt[r] = att; job[r] = CHECKING;
        printf("relay id %d: outbox.claim_unknown, attempt %d: asks the status URL\n", ID(r), att) }

    /* the status URL's answer (relay/outcome.c outcome_classify_status_check),
     * decided with was_ambiguous = true (on_unknown_claimed) */
    :: atomic { job[r] == CHECKING && ANSWER_OK ->
        if
        :: incons < INCONCLUSIVES -> incons++; conclude(r, C_REC_INCONCLUSIVE, true)
        :: ANSWER_TRUE ->
            if
            :: effects > 0 -> conclude(r, C_REC_EXECUTED, true)
            :: effects == 0 -> conclude(r, C_REC_NOT_EXECUTED, true)
            fi
        fi }

    /* a crash, at any step */
    :: atomic { stops[r] < CRASHES -> restart(r) }
    od
}

/* The record connection: outbox.record (migrations/0003_relay.sql; the
 * 13-array form of 0011_relay_hardening.sql has the same UPDATE) applies one
 * outcome if the row is in_flight or unknown, and lease_owner = p_relay, and
 * attempts = p_attempts[i] (else only the history row is written). Lease
 * cleared; ambiguous sticky, cleared only by reconciled_not_executed. 0011
 * applies one outcome per row and batch, the delivery's first: one of the
 * orders taken here. */
proctype db()
{
    byte k, m;
end_loop:
    do
    :: atomic { nb > 0 ->
        k = 0;
        do
        :: k + 1 < nb -> k++
        :: break
        od;
        if
        :: (st == INFLIGHT || st == UNKNOWN) && FENCE(k) ->
            st = bs[k]; CLEAR_OWNER; live = false; LEASE_CLEAR;
            amb = (bc[k] -> false : (amb || bm[k]));
            printf("db: outbox.record(relay id %d, attempt %d): state %d, ambiguous %d\n", bo[k], ba[k], st, amb)
        :: else ->    /* fenced out */
            printf("db: outbox.record(relay id %d, attempt %d, state %d): fenced out\n", bo[k], ba[k], bs[k])
        fi;
        unput(k, m);
        k = 0 }
    od
}

/* Lease expiry (lease_expires_at < now()). By itself when the holder is dead
 * or holds nothing for the row (relay/relay.c relay_renew_leases renews the
 * rows it holds, through outbox.renew_leases). While the holder is alive and
 * busy (a delivery, a status check, an outcome not yet recorded), only SLOWS
 * times: a partition from the database, a slow record connection. Under T3
 * never between the claim and the send. */
proctype clock()
{
end_loop:
    do
    :: atomic { live && (DEAD(owner) || (job[REL(owner)] == IDLE && nrec[OSLOT] == 0)) ->
        live = false;
        printf("clock: the lease of relay id %d expires (holder dead or idle)\n", owner) }
    :: atomic { live && slows < SLOWS && !DEAD(owner) && SLOW_OK(REL(owner)) &&
                (job[REL(owner)] != IDLE || nrec[OSLOT] > 0) ->
        live = false; slows++;
        printf("clock: the lease of relay id %d expires while it is busy (slow, partitioned)\n", owner) }
    od
}

/* The network and the target: a request arrives and is executed, or
 * deduplicated (a keyed target that remembers the key answers as the first
 * time: a lost request or response is then the same as a lost response), or
 * it does nothing (refused, or lost on the way). */
inline arrive(x) {
    if
    :: keyed && !forgot && effects > 0 -> x = R_EXEC;         /* deduplicated: the stored answer */
        printf("target: deduplicates the key\n")
    :: !(keyed && !forgot && effects > 0) ->
        if
        :: effects < 2 -> effects++
        :: else -> skip
        fi;
        x = R_EXEC;
        printf("target: EXECUTES (effects %d)\n", effects)
    :: !(keyed && !forgot && effects > 0) -> x = R_NOEXEC;
        printf("target: does not act (refused, or lost on the way)\n")
    fi
}

proctype target()
{
    byte x;
end_loop:
    do
    :: atomic { req[0] == R_TRAVEL -> arrive(x); req[0] = x; x = 0 }
    :: atomic { req[1] == R_TRAVEL -> arrive(x); req[1] = x; x = 0 }
    :: atomic { orphans > 0 -> orphans--; arrive(x); x = 0 }
    /* key_ttl passes (T4: not while a request is in flight) */
    :: atomic { keyed && !forgot && FORGET_OK -> forgot = true;
        printf("target: key_ttl passes, the key is forgotten\n") }
    /* flow control: outbox.target_event closes the gate (circuit open, 410s
     * disable the target); a probe or an admin opens it again */
    :: atomic { gate && gates < GATES -> gate = false; gates++ }
    :: atomic { !gate -> gate = true }
    od
}

/* Nothing can move any more: the intent must be settled or visibly unknown
 * (property no_dead_end, checked by the run without a never claim). */
#ifndef PROPERTIES_ONLY
active proctype watchdog()
{
end:
    timeout -> assert(SETTLED)
}
#endif

init {
    atomic {
#ifdef TARGET      /* one kind only: 0 keyed, 1 keyed + status URL, 2 keyless, 3 keyless + status URL */
        keyed = (TARGET < 2); has_status = (TARGET % 2 == 1);
#else
        if
        :: keyed = true;  has_status = false
        :: keyed = true;  has_status = true
        :: keyed = false; has_status = false
        :: keyed = false; has_status = true
        fi;
#endif
        printf("target: keyed %d, status URL %d. states: 0 pending, 1 in_flight, 2 unknown, 3 succeeded, 4 failed; classes: 0 not_sent, 1 ambiguous, 2 succeeded, 3 retry_later, 4 4xx, 5 reconciled_executed, 6 reconciled_not_executed, 7 reconcile_inconclusive\n", keyed, has_status);
        run relay(0);
        run relay(1);
        run db();
        run clock();
        run target()
    }
}
