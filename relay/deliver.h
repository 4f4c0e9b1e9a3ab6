/*
 * deliver.h — one intent → one HTTP request → what came of it.
 *
 * Owns the easy handle of one attempt, its headers and the bounded copy of
 * the response body. It does not decide anything: delivery_report() turns
 * what libcurl saw into attempt_facts for outcome.c.
 */
#ifndef OUTBOX_DELIVER_H
#define OUTBOX_DELIVER_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stdint.h>

#include "outcome.h"
#include "sql.h"
#include "lib/strbuf.h"
#include "mcp_upstream.h"
#include "targets.h"

enum delivery_kind {
    DELIVERY_SEND,         /* the intent itself, to the target's URL */
    DELIVERY_STATUS_CHECK, /* GET the target's status URL for the key (reconciliation) */
    DELIVERY_MCP_SETUP,    /* a step of an MCP target's session setup (mcp_upstream.c) */
    DELIVERY_MCP_REPLY     /* the error answering a request of an MCP server, POSTed back */
};

struct delivery {
    enum delivery_kind kind;
    struct target *target;
    int64_t intent_id;
    char *key;
    char *payload;
    size_t payload_len;
    int attempt;
    bool was_ambiguous;
    int64_t first_attempt_ms;
    bool probe;        /* the one request of a half-open circuit (set by the relay) */
    bool key_sent;     /* the request carries the key header (decided with the headers) */
    bool multiplexed;  /* asks for h2 (delivery_http_version): goes on the relay's h2 multi */
    char trace_id[33]; /* the caller's W3C trace id, sent in traceparent; "": none */
    char span_id[17];  /* this attempt's parent id in that header */

    CURL *easy;
    struct curl_slist *headers;
    struct strbuf body;
    size_t body_limit;
    int64_t retry_after_ms;
    uint64_t started_ns;
    uint64_t leased_ns; /* when the statement that leased the row was sent; 0: not known */
    char error[CURL_ERROR_SIZE];

    /* An MCP target's call or session setup (mcp_upstream.h): */
    bool mcp;                    /* a tools/call to an 'mcp' target */
    bool mcp_status;             /* ... of its status_tool (no key sent) */
    bool mcp_waiting;            /* in its session's waiting list */
    enum upstream_step mcp_step; /* DELIVERY_MCP_SETUP's step */
    char *mcp_session_id;        /* the Mcp-Session-Id header of the answer */
    char *mcp_session_sent;      /* the session id this call carried; NULL: none */
    char *mcp_refused;           /* why the call was never sent: initialize refused */
    char *content_type;          /* of the answer (delivery_report) */
    struct delivery *mcp_next;   /* the session's waiting list */
    size_t sse_scanned;          /* an event stream's bytes scanned for server requests */
    signed char sse;             /* the answer is an event stream: -1 not known yet, 0, 1 */
    int mcp_replies;             /* server requests answered (DELIVERY_MCP_REPLY made) */

    void *owner;                  /* the relay */
    struct delivery *prev, *next; /* the relay's in-flight list */
};

struct delivery_report {
    struct attempt_facts facts;
    int sent; /* 1 request bytes went out, 0 none did */
    long http_status;
    int latency_ms;
    char error[CURL_ERROR_SIZE + 64]; /* empty when none */
};

/* Adds "traceparent: 00-<trace id>-<new parent id>-<flags>" to a request
 * built by delivery_new: the caller's trace continues, one span per
 * attempt. A value that is not a W3C traceparent of version 00 adds
 * nothing (outbox.enqueue refuses those). Returns whether it added one. */
bool delivery_set_trace(struct delivery *d, const char *traceparent);
/* A random 64-bit parent id as 16 lower-case hex digits, never all zeros. */
void delivery_new_span_id(char out[17]);

/* Builds the request of a claimed row (its payload, key, attempt, trace
 * context and probe flag; what it points to is copied). NULL on failure to
 * set up. */
struct delivery *delivery_new(struct target *target, const struct claimed_row *row,
                              size_t body_limit, int64_t now_s);
/* A step of an MCP target's session setup (mcp_upstream.c): POST its body
 * to the target's URL. NULL on failure to set up. */
struct delivery *delivery_new_mcp_setup(struct target *target, enum upstream_step step,
                                        size_t body_limit);
/* The error answering a request of an MCP server on a call's stream
 * (upstream_refusal_body), POSTed to the target with the call's session
 * id. NULL on failure to set up. */
struct delivery *delivery_new_mcp_reply(struct delivery *call, const char *body);
/* Where deliver.c hands a DELIVERY_MCP_REPLY made inside libcurl's write
 * callback (the relay puts it on the multi after the callback returns:
 * libcurl refuses a new transfer from inside its callbacks). Its owner is
 * the call's. */
void delivery_set_reply_hook(void (*hook)(struct delivery *reply));
/* Builds a call to an MCP target (delivery_new left its body unset) for
 * its session as it is now: the tools/call body of the era, the transport's
 * headers, the session id. False when the payload is not a tools/call (a
 * target changed to 'mcp' after the intent was enqueued): then mcp_refused
 * says so. */
bool delivery_mcp_prepare(struct delivery *d);
/* The one wall clock of relay/: ms since the epoch (CLOCK_REALTIME). The
 * database's first_attempt_ms, key ages and Retry-After dates compare with
 * it; loop time (uv_now) is for timers only. */
int64_t wall_clock_ms(void);
/* Reconciliation of a row of claim_unknown: GET the status URL with {key}
 * percent-encoded. */
struct delivery *delivery_new_status_check(struct target *target, const struct claimed_row *row,
                                           size_t body_limit);
/* The status URL for a key: template with every {key} replaced by the
 * percent-encoded key. Caller frees. */
char *status_url_for_key(const char *template_url, const char *key);
/* --ca-file: the CA bundle for targets without their own ca_file; NULL or
 * "" = the system store. The string must outlive every delivery. */
void delivery_set_ca_file(const char *path);
/* When result is libcurl's "cannot use a local TLS file" (the CA bundle,
 * the client certificate or its key), writes into out which setting of the
 * target (or --ca-file, relay_ca) it was, then libcurl's text and detail
 * (a path at most, never a file's content), and returns true; else false. */
bool delivery_tls_file_error(CURLcode result, const struct target *target, const char *relay_ca,
                             const char *detail, char *out, size_t out_size);
/* Connections the relay's h2 multi may hold to one host:port (a target):
 * requests beyond what they carry (streams per connection, the server's
 * SETTINGS) wait in libcurl's queue for a stream. libcurl 7.88 waits for
 * a connection being made only until it knows the host multiplexes; after
 * that, each request that finds the connections full opened one of its own
 * (200 requests to nginx's 128 streams: 73 connections). */
#define DELIVERY_H2_CONNECTIONS_PER_HOST 4L

/* libcurl's CURLOPT_HTTP_VERSION for a request of target to url (the
 * delivery URL or a status URL): CURL_HTTP_VERSION_2TLS for a '2' target
 * with a key header and an https:// url, else CURL_HTTP_VERSION_1_1. _2TLS
 * also makes the request wait for a pending connection to multiplex on
 * (CURLOPT_PIPEWAIT). */
long delivery_http_version(const struct target *target, const char *url);
/* libcurl's receive buffer for a target whose answers take answer_bytes
 * (status line, headers, body): the smallest power of two from 1 KiB to 16
 * KiB that holds them. */
long delivery_receive_buffer_bytes(size_t answer_bytes);
/* A target's answer size after one more answer: up at once to a larger
 * one, down by a sixteenth of the difference per smaller one (a one-off
 * large answer stops mattering after a few dozen). delivery_report keeps
 * target->answer_bytes so. */
size_t delivery_answer_estimate(size_t estimate, size_t answer_bytes);
/* After the transfer ended with result (or was aborted: aborted = true). */
void delivery_report(struct delivery *d, CURLcode result, bool aborted,
                     struct delivery_report *report);
/* Gives the easy handle back to the pool and frees the rest. */
void delivery_free(struct delivery *d);
/* Cleans up pooled easy handles beyond keep (~7.5 KiB each: the handle and
 * what libcurl keeps in it between transfers; the receive buffer goes at
 * the end of each transfer); returns how many. The relay keeps what its
 * recent peak in flight needed: the pool otherwise holds the highest
 * in-flight ever seen, for good. */
size_t delivery_pool_trim(size_t keep);
/* Cleans up the pooled easy handles (at exit, before curl_global_cleanup). */
void delivery_pool_drain(void);

/* For tests and fuzzing (tests/fuzz/): libcurl's header and body callbacks of
 * a delivery (userp), as the transfer calls them: a Retry-After header line
 * sets retry_after_ms, body bytes go to the bounded copy. Return nmemb * size. */
size_t delivery_header_callback(char *data, size_t size, size_t nmemb, void *userp);
size_t delivery_body_callback(char *data, size_t size, size_t nmemb, void *userp);

#endif
