/*
 * http.c — libcurl multi ⇄ libuv (the recipe of EVENT-LOOP.md).
 *
 * DESIGN
 * curl tells us which sockets to watch (socket callback) and when to call it
 * back (timer callback); we translate both into uv_poll_t and one uv_timer_t,
 * and call curl_multi_socket_action from libuv's callbacks only, never from
 * inside curl's own callbacks. After every action we drain
 * curl_multi_info_read completely (curl's multi-uv example stops early and
 * misses the last transfer), remove each finished easy handle, and hand it
 * to the owner.
 *
 * Invariants: one uv_poll_t per socket, created on first interest and closed
 * on CURL_POLL_REMOVE (its memory freed in the close callback); the socket
 * context is unassigned from curl at the same moment.
 */
#include "http.h"

#include <stdlib.h>

struct http_client {
    uv_loop_t *loop;
    CURLM *multi;
    uv_timer_t timer;
    http_done_cb on_done;
    int open_handles; /* the timer plus live socket polls */
    bool closing;
    void (*on_closed)(void *data);
    void *closed_data;
};

struct socket_watch {
    uv_poll_t poll;
    curl_socket_t fd;
    http_client_t *client;
};

static void on_handle_closed(uv_handle_t *handle)
{
    http_client_t *client;
    if (handle->type == UV_POLL) {
        struct socket_watch *watch = handle->data;
        client = watch->client;
        free(watch);
    } else {
        client = handle->data;
    }
    if (--client->open_handles == 0 && client->closing) {
        void (*cb)(void *) = client->on_closed;
        void *data = client->closed_data;
        free(client);
        if (cb)
            cb(data);
    }
}

static void drain_finished(http_client_t *client)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(client->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        CURL *easy = msg->easy_handle;
        CURLcode result = msg->data.result;
        void *data = NULL;
        curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&data);
        curl_multi_remove_handle(client->multi, easy);
        client->on_done(easy, result, data);
    }
}

static void on_socket_ready(uv_poll_t *poll, int status, int events)
{
    struct socket_watch *watch = poll->data;
    http_client_t *client = watch->client;
    int flags = 0;
    if (status < 0)
        flags = CURL_CSELECT_ERR;
    else {
        if (events & UV_READABLE)
            flags |= CURL_CSELECT_IN;
        if (events & UV_WRITABLE)
            flags |= CURL_CSELECT_OUT;
    }
    int running = 0;
    curl_multi_socket_action(client->multi, watch->fd, flags, &running);
    drain_finished(client);
}

static void on_curl_timeout(uv_timer_t *timer)
{
    http_client_t *client = timer->data;
    int running = 0;
    curl_multi_socket_action(client->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    drain_finished(client);
}

static int curl_socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    http_client_t *client = userp;
    struct socket_watch *watch = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (watch) {
            uv_poll_stop(&watch->poll);
            uv_close((uv_handle_t *)&watch->poll, on_handle_closed);
            curl_multi_assign(client->multi, fd, NULL);
        }
        return 0;
    }
    if (watch == NULL) {
        watch = calloc(1, sizeof(*watch));
        if (watch == NULL)
            return -1;
        if (uv_poll_init_socket(client->loop, &watch->poll, fd) != 0) {
            free(watch);
            return -1;
        }
        watch->fd = fd;
        watch->client = client;
        watch->poll.data = watch;
        client->open_handles++;
        curl_multi_assign(client->multi, fd, watch);
    }
    int events = 0;
    if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
        events |= UV_READABLE;
    if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
        events |= UV_WRITABLE;
    uv_poll_start(&watch->poll, events, on_socket_ready);
    return 0;
}

static int curl_timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
    http_client_t *client = userp;
    if (timeout_ms < 0)
        uv_timer_stop(&client->timer);
    else
        uv_timer_start(&client->timer, on_curl_timeout, (uint64_t)timeout_ms, 0);
    return 0;
}

http_client_t *http_client_new(uv_loop_t *loop, http_done_cb on_done)
{
    http_client_t *client = calloc(1, sizeof(*client));
    if (client == NULL)
        return NULL;
    client->loop = loop;
    client->on_done = on_done;
    client->multi = curl_multi_init();
    if (client->multi == NULL) {
        free(client);
        return NULL;
    }
    uv_timer_init(loop, &client->timer);
    client->timer.data = client;
    client->open_handles = 1;
    curl_multi_setopt(client->multi, CURLMOPT_SOCKETFUNCTION, curl_socket_cb);
    curl_multi_setopt(client->multi, CURLMOPT_SOCKETDATA, client);
    curl_multi_setopt(client->multi, CURLMOPT_TIMERFUNCTION, curl_timer_cb);
    curl_multi_setopt(client->multi, CURLMOPT_TIMERDATA, client);
    /* Keep-alive connections for many targets and many parallel requests. */
    curl_multi_setopt(client->multi, CURLMOPT_MAXCONNECTS, 1024L);
    return client;
}

bool http_client_add(http_client_t *client, CURL *easy, void *data)
{
    curl_easy_setopt(easy, CURLOPT_PRIVATE, data);
    return curl_multi_add_handle(client->multi, easy) == CURLM_OK;
}

void http_client_remove(http_client_t *client, CURL *easy)
{
    curl_multi_remove_handle(client->multi, easy);
}

void http_client_close(http_client_t *client, void (*on_closed)(void *data), void *data)
{
    client->closing = true;
    client->on_closed = on_closed;
    client->closed_data = data;
    /* The socket callback fires during cleanup and closes the polls. */
    curl_multi_cleanup(client->multi);
    client->multi = NULL;
    uv_timer_stop(&client->timer);
    uv_close((uv_handle_t *)&client->timer, on_handle_closed);
}
