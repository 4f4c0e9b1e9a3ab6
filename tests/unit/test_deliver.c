/*
 * test_deliver.c — relay/deliver.h without a network: the status URL of a
 * key, libcurl's header and body callbacks (Retry-After, the bounded copy
 * of a body), the request a delivery sets up, and delivery_report for a
 * transfer that never ran (aborted, or failed before a byte was sent).
 * One test sends a request to a server on 127.0.0.1 in a thread of its
 * own, to see how libcurl writes a large body (the upload buffer).
 */
#include "unit.h"

#include "deliver.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* A target with what delivery_new reads; its strings are literals (a
 * delivery never frees its target). */
static struct target test_target(const char *key_header)
{
    struct target t;
    memset(&t, 0, sizeof(t));
    t.name = (char *)"payments";
    t.url = (char *)"http://127.0.0.1:9/refunds";
    t.method = (char *)"POST";
    t.key_header = (char *)key_header;
    t.status_url = (char *)"http://127.0.0.1:9/refunds/by-key/{key}";
    t.timeout_ms = 1000;
    return t;
}

static size_t feed_header(struct delivery *d, const char *line)
{
    return delivery_header_callback((char *)line, 1, strlen(line), d);
}

/* ---------------------------------------------------------------- status URL */

START_TEST(status_url_percent_encodes_the_key)
{
    char *url = status_url_for_key("http://h/by-key/{key}", "run-7f3a:step 4/..");
    ck_assert_str_eq(url, "http://h/by-key/run-7f3a%3Astep%204%2F..");
    free(url);
    url = status_url_for_key("http://h/{key}/again/{key}?k={key}", "a&b");
    ck_assert_str_eq(url, "http://h/a%26b/again/a%26b?k=a%26b");
    free(url);
    url = status_url_for_key("http://h/no-hole", "k");
    ck_assert_str_eq(url, "http://h/no-hole");
    free(url);
    url = status_url_for_key("http://h/{key", "k"); /* not a hole */
    ck_assert_str_eq(url, "http://h/{key");
    free(url);
    url = status_url_for_key("{key}", "\xc3\xa9");
    ck_assert_str_eq(url, "%C3%A9");
    free(url);
}
END_TEST

/* ---------------------------------------------------------------- callbacks */

START_TEST(header_callback_reads_retry_after)
{
    struct delivery d;
    memset(&d, 0, sizeof(d));
    d.retry_after_ms = -1;
    ck_assert_uint_eq(feed_header(&d, "Content-Type: application/json\r\n"), 32);
    ck_assert_int_eq(d.retry_after_ms, -1);
    feed_header(&d, "Retry-After: 7\r\n");
    ck_assert_int_eq(d.retry_after_ms, 7000);
    feed_header(&d, "retry-after:   120  \r\n");
    ck_assert_int_eq(d.retry_after_ms, 120000);
    feed_header(&d, "RETRY-AFTER: soon\r\n");
    ck_assert_int_eq(d.retry_after_ms, -1);
    feed_header(&d, "Retry-After: Sun, 06 Nov 1994 08:49:37 GMT\r\n");
    ck_assert_int_eq(d.retry_after_ms, 0); /* a date in the past: now */
}
END_TEST

/* A line of 256 bytes or more is not read (the value would not fit the
 * copy); every line is still consumed whole. */
START_TEST(header_callback_ignores_long_lines)
{
    struct delivery d;
    memset(&d, 0, sizeof(d));
    d.retry_after_ms = -1;
    char line[300];
    memcpy(line, "Retry-After: 5", 14);
    memset(line + 14, ' ', sizeof(line) - 14);
    line[sizeof(line) - 1] = '\0';
    ck_assert_uint_eq(feed_header(&d, line), sizeof(line) - 1);
    ck_assert_int_eq(d.retry_after_ms, -1);
    ck_assert_uint_eq(feed_header(&d, "Retry-After:"), 12); /* no value at all */
    ck_assert_int_eq(d.retry_after_ms, -1);
}
END_TEST

/* The body keeps at most body_limit bytes, and every byte is reported as
 * consumed, so an oversized answer does not fail the transfer. */
START_TEST(body_callback_keeps_a_bounded_copy)
{
    struct delivery d;
    memset(&d, 0, sizeof(d));
    strbuf_init(&d.body);
    d.body_limit = 10;
    ck_assert_uint_eq(delivery_body_callback((char *)"0123456", 1, 7, &d), 7);
    ck_assert_uint_eq(delivery_body_callback((char *)"789abc", 2, 3, &d), 6);
    ck_assert_uint_eq(d.body.len, 10);
    ck_assert_str_eq(d.body.data, "0123456789");
    ck_assert_uint_eq(delivery_body_callback((char *)"more", 1, 4, &d), 4);
    ck_assert_uint_eq(d.body.len, 10);
    strbuf_free(&d.body);

    /* Past the first block the copy grows to the limit and no further. */
    memset(&d, 0, sizeof(d));
    strbuf_init(&d.body);
    d.body_limit = 1000;
    char chunk[700];
    memset(chunk, 'x', sizeof(chunk));
    ck_assert_uint_eq(delivery_body_callback(chunk, 1, sizeof(chunk), &d), sizeof(chunk));
    ck_assert_uint_eq(delivery_body_callback(chunk, 1, sizeof(chunk), &d), sizeof(chunk));
    ck_assert_uint_eq(d.body.len, 1000);
    ck_assert_uint_le(d.body.cap, 1001);
    strbuf_free(&d.body);

    memset(&d, 0, sizeof(d));
    strbuf_init(&d.body);
    d.body_limit = 0; /* --max-response-bytes 0: nothing kept */
    ck_assert_uint_eq(delivery_body_callback((char *)"x", 1, 1, &d), 1);
    ck_assert_uint_eq(d.body.len, 0);
    strbuf_free(&d.body);
}
END_TEST

/* A claimed row as the claim answers it (the texts are literals). */
static struct claimed_row claimed(int64_t id, const char *key, const char *payload, int attempt,
                                  bool ambiguous, int64_t first_attempt_ms)
{
    return (struct claimed_row){.id = id,
                                .key = key,
                                .target = "t",
                                .payload = payload,
                                .attempt = attempt,
                                .ambiguous = ambiguous,
                                .first_attempt_ms = first_attempt_ms};
}

/* ---------------------------------------------------------------- a delivery */

START_TEST(new_delivery_copies_and_decides_the_key_header)
{
    struct target t = test_target("Idempotency-Key");
    char payload[] = "{\"amount\": 5}";
    struct claimed_row row = claimed(42, "run:1", payload, 2, true, 1700000000000);
    struct delivery *d = delivery_new(&t, &row, 64, 1700000000);
    ck_assert_ptr_nonnull(d);
    payload[0] = 'X'; /* the delivery has its own copy */
    ck_assert_int_eq(d->kind, DELIVERY_SEND);
    ck_assert_str_eq(d->payload, "{\"amount\": 5}");
    ck_assert_uint_eq(d->payload_len, 13);
    ck_assert_str_eq(d->key, "run:1");
    ck_assert_int_eq(d->intent_id, 42);
    ck_assert_int_eq(d->attempt, 2);
    ck_assert(d->was_ambiguous);
    ck_assert(d->key_sent);
    ck_assert_int_eq(d->retry_after_ms, -1);
    delivery_free(d);

    struct target keyless = test_target(NULL);
    row = claimed(43, "run:2", "{}", 1, false, 0);
    row.probe = true;
    d = delivery_new(&keyless, &row, 64, 1700000000);
    ck_assert(d->probe); /* the claim's probe flag travels with the request */
    ck_assert(!d->key_sent);
    delivery_free(d);
}
END_TEST

START_TEST(status_check_has_no_payload)
{
    struct target t = test_target("Idempotency-Key");
    struct claimed_row row = claimed(7, "run:3", NULL, 3, true, 1700000000000);
    struct delivery *d = delivery_new_status_check(&t, &row, 64);
    ck_assert_ptr_nonnull(d);
    ck_assert_int_eq(d->kind, DELIVERY_STATUS_CHECK);
    ck_assert_str_eq(d->payload, "");
    ck_assert_uint_eq(d->payload_len, 0);
    ck_assert(d->was_ambiguous);
    delivery_free(d);
}
END_TEST

/* Handles given back wait in the pool; a trim keeps only what recent demand
 * needed, and the next deliveries take from what is left. */
START_TEST(pool_follows_demand)
{
    struct target t = test_target("Idempotency-Key");
    delivery_pool_drain();
    struct claimed_row row = claimed(1, "k", "{}", 1, false, 0);
    struct delivery *d[3];
    for (int i = 0; i < 3; i++)
        d[i] = delivery_new(&t, &row, 64, 0);
    for (int i = 0; i < 3; i++)
        delivery_free(d[i]);
    ck_assert_uint_eq(delivery_pool_trim(1), 2); /* three pooled, one kept */
    ck_assert_uint_eq(delivery_pool_trim(1), 0);
    struct delivery *again = delivery_new(&t, &row, 64, 0);
    ck_assert_ptr_nonnull(again);
    delivery_free(again);
    ck_assert_uint_eq(delivery_pool_trim(0), 1);
}
END_TEST

/* libcurl's receive buffer follows what the target answers: 1 KiB for the
 * few hundred bytes a webhook answers, up to libcurl's 16 KiB for big
 * answers; the estimate rises at once and falls slowly. */
START_TEST(receive_buffer_follows_the_answers)
{
    ck_assert_int_eq(delivery_receive_buffer_bytes(0), 1024);
    ck_assert_int_eq(delivery_receive_buffer_bytes(300), 1024);
    ck_assert_int_eq(delivery_receive_buffer_bytes(1024), 1024);
    ck_assert_int_eq(delivery_receive_buffer_bytes(1025), 2048);
    ck_assert_int_eq(delivery_receive_buffer_bytes(5000), 8192);
    ck_assert_int_eq(delivery_receive_buffer_bytes(70000), 16384);

    size_t estimate = delivery_answer_estimate(300, 70000);
    ck_assert_uint_eq(estimate, 70000);
    estimate = delivery_answer_estimate(estimate, 300);
    ck_assert_uint_eq(estimate, 70000 - (69700 + 15) / 16);
    int answers = 1;
    while (delivery_receive_buffer_bytes(estimate) > 1024) {
        estimate = delivery_answer_estimate(estimate, 300);
        answers++;
    }
    ck_assert_int_ge(answers, 60); /* one large answer is not forgotten at once */
    ck_assert_int_le(answers, 80); /* nor kept */
    for (int i = 0; i < 1000; i++)
        estimate = delivery_answer_estimate(estimate, 300);
    ck_assert_uint_eq(estimate, 300);

    /* a delivery's report moves its target's estimate: nothing came back */
    struct target t = test_target("Idempotency-Key");
    t.answer_bytes = 1600;
    struct claimed_row row = claimed(1, "k", "{}", 1, false, 0);
    struct delivery *d = delivery_new(&t, &row, 64, 0);
    struct delivery_report report;
    delivery_report(d, CURLE_COULDNT_CONNECT, false, &report);
    ck_assert_uint_eq(t.answer_bytes, 1500);
    delivery_free(d);
}
END_TEST

/* A server for one request: reads it whole (headers, then Content-Length
 * bytes of body), answers 200 and closes. */
struct one_request_server {
    int listener;
    size_t body_bytes; /* the body it read */
};

static void *serve_one_request(void *arg)
{
    struct one_request_server *srv = arg;
    int fd = accept(srv->listener, NULL, NULL);
    if (fd < 0)
        return NULL;
    static char buf[1 << 16];
    size_t have = 0, want = 0;
    char *end = NULL;
    ssize_t n;
    while (end == NULL && have < sizeof(buf) - 1 &&
           (n = read(fd, buf + have, sizeof(buf) - 1 - have)) > 0) {
        have += (size_t)n;
        buf[have] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    if (end != NULL) {
        char *length = strcasestr(buf, "\r\nContent-Length:");
        want = length ? strtoul(length + 17, NULL, 10) : 0;
        srv->body_bytes = have - (size_t)(end + 4 - buf);
        while (srv->body_bytes < want && (n = read(fd, buf, sizeof(buf))) > 0)
            srv->body_bytes += (size_t)n;
    }
    static const char answer[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
    ssize_t w = write(fd, answer, sizeof(answer) - 1);
    (void)w;
    close(fd);
    return NULL;
}

static size_t largest_write;
static size_t written;

static int on_debug(CURL *easy, curl_infotype type, char *data, size_t size, void *userp)
{
    (void)easy, (void)data, (void)userp;
    if (type == CURLINFO_DATA_OUT) {
        written += size;
        if (size > largest_write)
            largest_write = size;
    }
    return 0;
}

/* A send buffer large enough that the kernel takes whatever libcurl writes
 * at once: what a write carries is then what libcurl's buffer held. */
static int large_send_buffer(void *clientp, curl_socket_t fd, curlsocktype purpose)
{
    (void)clientp, (void)purpose;
    int bytes = 1 << 20;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
    return CURL_SOCKOPT_OK;
}

/* libcurl's upload buffer is its least, 16 KiB, not its default 64: over
 * TLS libcurl 7.88 copies each request into it (allocated per request in
 * flight, whatever the request's size), and for a body too large to go out
 * with the headers it is what each write of the body carries, over TLS or
 * not (a TLS record holds 16 KiB anyway). Seen here as the largest write of
 * a 200 KiB body, over HTTP to a server on loopback. */
START_TEST(request_goes_out_through_a_small_upload_buffer)
{
    struct one_request_server srv = {.listener = socket(AF_INET, SOCK_STREAM, 0)};
    ck_assert_int_ge(srv.listener, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(addr);
    ck_assert_int_eq(bind(srv.listener, (struct sockaddr *)&addr, sizeof(addr)), 0);
    ck_assert_int_eq(listen(srv.listener, 1), 0);
    ck_assert_int_eq(getsockname(srv.listener, (struct sockaddr *)&addr, &len), 0);
    pthread_t server;
    ck_assert_int_eq(pthread_create(&server, NULL, serve_one_request, &srv), 0);

    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/hook", ntohs(addr.sin_port));
    struct target t = test_target("Idempotency-Key");
    t.url = url;
    size_t payload_len = 200 * 1024;
    char *payload = malloc(payload_len + 1);
    memset(payload, ' ', payload_len);
    payload[0] = '[', payload[payload_len - 1] = ']', payload[payload_len] = '\0';
    struct claimed_row row = claimed(1, "big", payload, 1, false, 0);
    struct delivery *d = delivery_new(&t, &row, 64, 0);
    ck_assert_ptr_nonnull(d);
    largest_write = written = 0;
    curl_easy_setopt(d->easy, CURLOPT_VERBOSE, 1L);
    curl_easy_setopt(d->easy, CURLOPT_DEBUGFUNCTION, on_debug);
    curl_easy_setopt(d->easy, CURLOPT_SOCKOPTFUNCTION, large_send_buffer);
    ck_assert_int_eq(curl_easy_perform(d->easy), CURLE_OK);
    pthread_join(server, NULL);
    close(srv.listener);

    long status = 0;
    curl_easy_getinfo(d->easy, CURLINFO_RESPONSE_CODE, &status);
    ck_assert_int_eq(status, 200);
    ck_assert_uint_eq(srv.body_bytes, payload_len);
    ck_assert_uint_eq(written, payload_len);
    ck_assert_uint_gt(largest_write, 0);
    ck_assert_uint_le(largest_write, 16384);
    delivery_free(d);
    free(payload);
}
END_TEST

/* A transfer that never wrote a byte is not sent, whatever ended it. */
START_TEST(report_of_a_transfer_that_sent_nothing)
{
    struct target t = test_target("Idempotency-Key");
    struct claimed_row row = claimed(1, "k", "{}", 1, false, 0);
    struct delivery *d = delivery_new(&t, &row, 64, 0);
    struct delivery_report report;
    delivery_report(d, CURLE_ABORTED_BY_CALLBACK, true, &report);
    ck_assert_int_eq(report.sent, 0);
    ck_assert_int_eq(report.facts.transport, TRANSPORT_FAILED_UNSENT);
    ck_assert(report.facts.honours_keys);
    ck_assert_int_eq(report.http_status, 0);
    ck_assert_str_eq(report.error, "aborted at shutdown (nothing sent)");

    delivery_report(d, CURLE_COULDNT_CONNECT, false, &report);
    ck_assert_int_eq(report.facts.transport, TRANSPORT_FAILED_UNSENT);
    ck_assert_str_eq(report.error, "Couldn't connect to server: no detail");
    ck_assert_int_ge(report.latency_ms, 0);
    delivery_free(d);
}
END_TEST

/* TLS files: the request names the target's ca_file (else --ca-file) and
 * client certificate; a file libcurl cannot use is reported by the
 * setting's name, not_sent; other TLS failures keep libcurl's text. */
START_TEST(report_names_the_tls_file_that_cannot_be_used)
{
    struct target t = test_target("Idempotency-Key");
    char out[CURL_ERROR_SIZE + 64];
    ck_assert(delivery_tls_file_error(CURLE_SSL_CACERT_BADFILE, &t, NULL, "", out, sizeof(out)));
    ck_assert_str_eq(out, "the system CA store cannot be used: Problem with the SSL CA cert (path? "
                          "access rights?): no detail");
    ck_assert(delivery_tls_file_error(CURLE_SSL_CACERT_BADFILE, &t, "/relay/ca.pem", "d", out,
                                      sizeof(out)));
    ck_assert_str_eq(out, "--ca-file cannot be used: Problem with the SSL CA cert (path? access "
                          "rights?): d");
    t.ca_file = (char *)"/t/ca.pem";
    ck_assert(delivery_tls_file_error(CURLE_SSL_CACERT_BADFILE, &t, "/relay/ca.pem",
                                      "error setting certificate file: /t/ca.pem", out,
                                      sizeof(out)));
    ck_assert_str_eq(out,
                     "the target's ca_file cannot be used: Problem with the SSL CA cert (path? "
                     "access rights?): error setting certificate file: /t/ca.pem");
    /* a client certificate problem names the pair, only for a target that has one */
    ck_assert(!delivery_tls_file_error(CURLE_SSL_CERTPROBLEM, &t, NULL, "d", out, sizeof(out)));
    t.client_cert_file = (char *)"/t/client.pem";
    t.client_key_file = (char *)"/t/client.key";
    ck_assert(delivery_tls_file_error(CURLE_SSL_CERTPROBLEM, &t, NULL, "d", out, sizeof(out)));
    ck_assert_str_eq(out,
                     "the target's client_cert_file or client_key_file cannot be used: Problem "
                     "with the local SSL certificate: d");
    /* verification failures and the rest are not about a local file */
    ck_assert(
        !delivery_tls_file_error(CURLE_PEER_FAILED_VERIFICATION, &t, NULL, "d", out, sizeof(out)));
    ck_assert(!delivery_tls_file_error(CURLE_COULDNT_CONNECT, &t, NULL, "d", out, sizeof(out)));

    /* through delivery_report: not sent, the setting named */
    struct claimed_row row = claimed(1, "k", "{}", 1, false, 0);
    struct delivery *d = delivery_new(&t, &row, 64, 0);
    snprintf(d->error, sizeof(d->error),
             "unable to set private key file: '/t/client.key' type PEM");
    struct delivery_report report;
    delivery_report(d, CURLE_SSL_CERTPROBLEM, false, &report);
    ck_assert_int_eq(report.facts.transport, TRANSPORT_FAILED_UNSENT);
    ck_assert_str_eq(report.error,
                     "the target's client_cert_file or client_key_file cannot be used: Problem "
                     "with the local SSL certificate: unable to set private key file: "
                     "'/t/client.key' type PEM");
    delivery_free(d);
}
END_TEST

/* HTTP version per target (0030): 1.1 set explicitly (libcurl would offer
 * h2 to https:// otherwise); '2' offers h2 by ALPN, over TLS only; never
 * h2 for a target without a key header. */
START_TEST(http_version_per_target)
{
    struct target t = test_target("Idempotency-Key");
    const char *https = "https://api.test/hook", *http = "http://api.test/hook";
    ck_assert_int_eq(delivery_http_version(&t, https), CURL_HTTP_VERSION_1_1);
    ck_assert_int_eq(delivery_http_version(&t, http), CURL_HTTP_VERSION_1_1);
    t.http = TARGET_HTTP_2;
    ck_assert_int_eq(delivery_http_version(&t, https), CURL_HTTP_VERSION_2TLS);
    ck_assert_int_eq(delivery_http_version(&t, "HTTPS://api.test/"), CURL_HTTP_VERSION_2TLS);
    /* cleartext: HTTP/1.1 (a status URL may be http:// under an https:// target) */
    ck_assert_int_eq(delivery_http_version(&t, http), CURL_HTTP_VERSION_1_1);
    ck_assert_int_eq(delivery_http_version(&t, "httpsx"), CURL_HTTP_VERSION_1_1);
    ck_assert_int_eq(delivery_http_version(&t, NULL), CURL_HTTP_VERSION_1_1);

    /* without a key header: HTTP/1.1 and a connection per request, always */
    struct target keyless = test_target(NULL);
    keyless.http = TARGET_HTTP_2;
    ck_assert_int_eq(delivery_http_version(&keyless, https), CURL_HTTP_VERSION_1_1);
    ck_assert_int_eq(delivery_http_version(&keyless, http), CURL_HTTP_VERSION_1_1);
}
END_TEST

/* An HTTP/2 stream error needs an open stream, which only the request
 * opens: sent (ambiguous), even when libcurl's count of request bytes says
 * 0; other failures with nothing counted stay unsent. */
START_TEST(http2_stream_error_is_after_send)
{
    struct target t = test_target("Idempotency-Key");
    t.http = TARGET_HTTP_2;
    struct claimed_row row = claimed(1, "k", "{}", 1, false, 0);
    struct delivery *d = delivery_new(&t, &row, 64, 0);
    struct delivery_report report;
    delivery_report(d, CURLE_HTTP2_STREAM, false, &report);
    ck_assert(report.sent);
    ck_assert_int_eq(report.facts.transport, TRANSPORT_FAILED_AFTER_SEND);
    delivery_report(d, CURLE_HTTP2, false, &report);
    ck_assert(!report.sent);
    ck_assert_int_eq(report.facts.transport, TRANSPORT_FAILED_UNSENT);
    delivery_report(d, CURLE_HTTP2_STREAM, true, &report);
    ck_assert_str_eq(report.error, "aborted at shutdown (nothing sent)");
    delivery_free(d);
}
END_TEST

/* ---------------------------------------------------------------- trace context */

static const char *trace_header_of(const struct delivery *d)
{
    for (const struct curl_slist *h = d->headers; h; h = h->next)
        if (strncmp(h->data, "traceparent: ", 13) == 0)
            return h->data + 13;
    return NULL;
}

START_TEST(trace_context_continues_with_a_new_parent_per_attempt)
{
    struct target t = test_target("Idempotency-Key");
    const char *caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    struct claimed_row row1 = claimed(1, "k", "{}", 1, false, 0),
                       row2 = claimed(1, "k", "{}", 2, false, 0);
    struct delivery *a = delivery_new(&t, &row1, 64, 0);
    struct delivery *b = delivery_new(&t, &row2, 64, 0);
    ck_assert(delivery_set_trace(a, caller));
    row2.traceparent = caller; /* as the claim hands it: delivery_new continues it */
    delivery_free(b);
    b = delivery_new(&t, &row2, 64, 0);
    const char *ha = trace_header_of(a), *hb = trace_header_of(b);
    ck_assert_ptr_nonnull(ha);
    ck_assert_ptr_nonnull(hb);
    ck_assert_uint_eq(strlen(ha), 55);
    ck_assert_int_eq(strncmp(ha, "00-4bf92f3577b34da6a3ce929d0e0e4736-", 36), 0); /* same trace */
    ck_assert_str_eq(ha + 52, "-01");                                             /* same flags */
    ck_assert_int_ne(strncmp(ha + 36, "00f067aa0ba902b7", 16), 0); /* not the caller's parent */
    ck_assert_int_ne(strncmp(ha + 36, hb + 36, 16), 0);            /* one per attempt */
    ck_assert_str_eq(a->trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
    ck_assert_int_eq(strncmp(ha + 36, a->span_id, 16), 0);
    delivery_free(a);
    delivery_free(b);
}
END_TEST

START_TEST(trace_context_refuses_what_is_not_version_00)
{
    struct target t = test_target("Idempotency-Key");
    static const char *const bad[] = {
        "",
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        "00-4bf92f3577b34da6a3ce929d0e0e4736x00f067aa0ba902b7-01",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct claimed_row row = claimed(1, "k", "{}", 1, false, 0);
        struct delivery *d = delivery_new(&t, &row, 64, 0);
        ck_assert_msg(!delivery_set_trace(d, bad[i]), "accepted '%s'", bad[i]);
        ck_assert_ptr_null(trace_header_of(d));
        ck_assert_str_eq(d->trace_id, "");
        delivery_free(d);
    }
    char span[17];
    delivery_new_span_id(span);
    ck_assert_uint_eq(strlen(span), 16);
    ck_assert_str_ne(span, "0000000000000000");
}
END_TEST

/* Within a second of time(2) on either side: time(2) reads the coarse
 * clock, which can be a tick behind clock_gettime's (CI saw the precise
 * clock 5 ms into a second that time() had not reached). Seconds or
 * microseconds instead of milliseconds would be off by orders. */
START_TEST(wall_clock_is_the_epoch_in_ms)
{
    int64_t before = ((int64_t)time(NULL) - 1) * 1000;
    int64_t now = wall_clock_ms();
    int64_t after = ((int64_t)time(NULL) + 2) * 1000;
    ck_assert_int_ge(now, before);
    ck_assert_int_le(now, after);
}
END_TEST

Suite *deliver_suite(void)
{
    Suite *s = suite_create("deliver");
    TCase *tc = tcase_create("status_url");
    tcase_add_test(tc, status_url_percent_encodes_the_key);
    suite_add_tcase(s, tc);
    tc = tcase_create("callbacks");
    tcase_add_test(tc, header_callback_reads_retry_after);
    tcase_add_test(tc, header_callback_ignores_long_lines);
    tcase_add_test(tc, body_callback_keeps_a_bounded_copy);
    suite_add_tcase(s, tc);
    tc = tcase_create("delivery");
    tcase_add_test(tc, new_delivery_copies_and_decides_the_key_header);
    tcase_add_test(tc, status_check_has_no_payload);
    tcase_add_test(tc, pool_follows_demand);
    tcase_add_test(tc, receive_buffer_follows_the_answers);
    tcase_add_test(tc, request_goes_out_through_a_small_upload_buffer);
    tcase_add_test(tc, report_of_a_transfer_that_sent_nothing);
    tcase_add_test(tc, report_names_the_tls_file_that_cannot_be_used);
    tcase_add_test(tc, http_version_per_target);
    tcase_add_test(tc, http2_stream_error_is_after_send);
    tcase_add_test(tc, trace_context_continues_with_a_new_parent_per_attempt);
    tcase_add_test(tc, trace_context_refuses_what_is_not_version_00);
    tcase_add_test(tc, wall_clock_is_the_epoch_in_ms);
    suite_add_tcase(s, tc);
    return s;
}
