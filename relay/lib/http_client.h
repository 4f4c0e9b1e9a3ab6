/*
 * http_client.h — libcurl's multi interface driven by the libuv loop.
 *
 * Owns: the CURLM handle, one uv_timer_t for curl's timeout, and one
 * uv_poll_t per socket curl asks us to watch. Callers own their easy
 * handles: http_client_add() starts a transfer, and when it finishes the
 * done callback receives the easy handle (already removed from the multi
 * handle) with curl's result code.
 */
#ifndef OUTBOX_HTTP_H
#define OUTBOX_HTTP_H

#include <curl/curl.h>
#include <stdbool.h>
#include <uv.h>

typedef struct http_client http_client_t;

/* HTTP/2 streams per connection (CURLMOPT_MAX_CONCURRENT_STREAMS; libcurl's
 * default is 100): high enough that the server's SETTINGS decide (nginx:
 * 128), so that its connections carry all it allows. */
#define HTTP_CLIENT_STREAMS_PER_CONNECTION 1000L

/* data is what was passed to http_client_add for this easy handle. */
typedef void (*http_done_cb)(CURL *easy, CURLcode result, void *data);

/* max_connections: kept-alive connections at most (CURLMOPT_MAXCONNECTS);
 * beyond it libcurl closes the one idle the longest when a transfer ends.
 * The relay passes its --max-in-flight, so that open connections, and over
 * TLS their state (tens of KiB each), never outnumber the deliveries that
 * README's memory bound counts, however many targets they went to. */
http_client_t *http_client_new(uv_loop_t *loop, http_done_cb on_done, long max_connections);
bool http_client_add(http_client_t *client, CURL *easy, void *data);
/* At most n connections to one host:port (CURLMOPT_MAX_HOST_CONNECTIONS):
 * transfers beyond them wait in libcurl's queue (their timeout runs). */
void http_client_set_max_host_connections(http_client_t *client, long n);
/* Stop a transfer without a done callback (shutdown after the grace period). */
void http_client_remove(http_client_t *client, CURL *easy);
/* All easy handles must be removed first. on_closed runs once the timer
 * and every socket poll handle are closed; then client is freed. */
void http_client_close(http_client_t *client, void (*on_closed)(void *data), void *data);

#endif
