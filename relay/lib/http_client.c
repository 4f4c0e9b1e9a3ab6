/*
 * http_client.c — libcurl multi ⇄ libuv (the recipe of docs/event-loop.md).
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
 * Invariants: one uv_poll_t per socket curl asks us to watch, its memory
 * freed in the close callback, and never a poll handle on a closed socket.
 *
 * Connection sockets outlive transfers: curl says CURL_POLL_REMOVE each time
 * a keep-alive connection goes back to its cache, and the next transfer on it
 * wants the same socket watched again. Closing and re-creating the poll
 * handle each time cost an allocation and epoll_ctl calls per delivery (~7 %
 * of the relay's CPU in the drain bench). So the sockets curl opens for
 * connections are opened here (CURLOPT_OPENSOCKETFUNCTION) and closed here
 * (CURLOPT_CLOSESOCKETFUNCTION); their poll handle is kept, by descriptor,
 * from the first transfer to that close, and while the connection idles it
 * stays registered for input if it was (the next request's wait for its
 * response needs just that: no epoll_ctl at all). Any other socket curl
 * reports (its resolver's socket pair, which it closes itself) keeps the
 * simple rule: REMOVE closes the poll handle.
 */
#include "lib/http_client.h"

#include "lib/xalloc.h"

#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

struct http_client {
    uv_loop_t *loop;
    CURLM *multi;
    uv_timer_t timer;
    http_done_cb on_done;
    int open_handles; /* the timer plus live socket polls */
    bool closing;
    void (*on_closed)(void *data);
    void *closed_data;
    struct fd_slot *fds; /* indexed by descriptor */
    size_t fd_cap;
};

struct fd_slot {
    struct socket_watch *watch; /* its poll handle, if it has one */
    bool connection;            /* opened by on_curl_open_socket, not closed yet */
};

struct socket_watch {
    uv_poll_t poll;
    curl_socket_t fd;
    int events;  /* what the poll handle waits for now (0: stopped) */
    bool parked; /* curl said REMOVE: the connection idles in curl's cache */
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
        free(client->fds);
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
    if (watch->parked) {
        /* An idle keep-alive connection became readable: the server closed it
         * (or says something unasked). Stop watching; curl checks a cached
         * connection before it reuses it and closes this one then. */
        uv_poll_stop(&watch->poll);
        watch->events = 0;
        return;
    }
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

/* The slot of fd, growing the table (NULL when out of memory). */
static struct fd_slot *fd_slot(http_client_t *client, curl_socket_t fd)
{
    if (fd < 0)
        return NULL;
    size_t slot = (size_t)fd;
    if (slot >= client->fd_cap) {
        size_t cap = client->fd_cap ? client->fd_cap : 64;
        while (cap <= slot)
            cap *= 2;
        struct fd_slot *grown = realloc(client->fds, cap * sizeof(*grown));
        if (grown == NULL)
            return NULL;
        for (size_t i = client->fd_cap; i < cap; i++)
            grown[i] = (struct fd_slot){NULL, false};
        client->fds = grown;
        client->fd_cap = cap;
    }
    return &client->fds[slot];
}

/* The poll handle of fd: the kept one, or a new one (NULL when out of memory). */
static struct socket_watch *watch_for_socket(http_client_t *client, curl_socket_t fd)
{
    struct fd_slot *slot = fd_slot(client, fd);
    if (slot == NULL)
        return NULL;
    if (slot->watch)
        return slot->watch;
    struct socket_watch *watch = calloc(1, sizeof(*watch));
    if (watch == NULL)
        return NULL;
    if (uv_poll_init_socket(client->loop, &watch->poll, fd) != 0) {
        free(watch);
        return NULL;
    }
    watch->fd = fd;
    watch->client = client;
    watch->poll.data = watch;
    client->open_handles++;
    slot->watch = watch;
    return watch;
}

/* Close the poll handle of fd, if it has one (before the socket closes). */
static void forget_watch(http_client_t *client, curl_socket_t fd)
{
    if (fd < 0 || (size_t)fd >= client->fd_cap || client->fds[fd].watch == NULL)
        return;
    struct socket_watch *watch = client->fds[fd].watch;
    client->fds[fd].watch = NULL;
    uv_close((uv_handle_t *)&watch->poll, on_handle_closed);
}

/* CURLOPT_OPENSOCKETFUNCTION: a socket for a connection (what curl does
 * itself, plus a note that this descriptor's poll handle may be kept). */
static curl_socket_t on_curl_open_socket(void *clientp, curlsocktype purpose,
                                         struct curl_sockaddr *address)
{
    http_client_t *client = clientp;
    (void)purpose;
    curl_socket_t fd = socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
    if (fd == CURL_SOCKET_BAD)
        return fd;
    struct fd_slot *slot = fd_slot(client, fd);
    if (slot == NULL) {
        close(fd);
        return CURL_SOCKET_BAD;
    }
    forget_watch(client, fd); /* a handle left on this number (cannot happen; be sure) */
    slot->connection = true;
    return fd;
}

/* CURLOPT_CLOSESOCKETFUNCTION: curl closes a connection's socket. */
static int on_curl_close_socket(void *clientp, curl_socket_t fd)
{
    http_client_t *client = clientp;
    forget_watch(client, fd);
    if (fd >= 0 && (size_t)fd < client->fd_cap)
        client->fds[fd].connection = false;
    return close(fd);
}

static int curl_socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    http_client_t *client = userp;
    struct socket_watch *watch = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (watch == NULL)
            return 0;
        if (!client->fds[fd].connection) {
            forget_watch(client, fd);
            return 0;
        }
        /* A connection going back to curl's cache: keep its handle (see the
         * top of this file), registered for input if it was. */
        watch->parked = true;
        if (watch->events != UV_READABLE) {
            uv_poll_stop(&watch->poll);
            watch->events = 0;
        }
        return 0;
    }
    if (watch == NULL) {
        watch = watch_for_socket(client, fd);
        if (watch == NULL)
            return -1;
        curl_multi_assign(client->multi, fd, watch);
    }
    int events = 0;
    if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
        events |= UV_READABLE;
    if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
        events |= UV_WRITABLE;
    watch->parked = false;
    if (events != watch->events) {
        uv_poll_start(&watch->poll, events, on_socket_ready);
        watch->events = events;
    }
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

http_client_t *http_client_new(uv_loop_t *loop, http_done_cb on_done, long max_connections)
{
    http_client_t *client = xcalloc(1, sizeof(*client));
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
    /* Kept-alive connections, all targets together (http_client.h). */
    curl_multi_setopt(client->multi, CURLMOPT_MAXCONNECTS,
                      max_connections > 0 ? max_connections : 1L);
    /* HTTP/2 transfers share a connection as streams (libcurl's default,
     * set here because the relay counts on it: a transfer that asks for h2
     * and CURLOPT_PIPEWAIT rides a connection already made or being made),
     * at most this many per connection (fewer if the server's SETTINGS say
     * so); beyond it libcurl opens another connection, unless
     * http_client_set_max_host_connections holds it to a cap. */
    curl_multi_setopt(client->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
    curl_multi_setopt(client->multi, CURLMOPT_MAX_CONCURRENT_STREAMS,
                      HTTP_CLIENT_STREAMS_PER_CONNECTION);
    return client;
}

void http_client_set_max_host_connections(http_client_t *client, long n)
{
    curl_multi_setopt(client->multi, CURLMOPT_MAX_HOST_CONNECTIONS, n);
}

bool http_client_add(http_client_t *client, CURL *easy, void *data)
{
    curl_easy_setopt(easy, CURLOPT_PRIVATE, data);
    curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, on_curl_open_socket);
    curl_easy_setopt(easy, CURLOPT_OPENSOCKETDATA, client);
    curl_easy_setopt(easy, CURLOPT_CLOSESOCKETFUNCTION, on_curl_close_socket);
    curl_easy_setopt(easy, CURLOPT_CLOSESOCKETDATA, client);
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
    /* Cleanup closes the cached connections (through on_curl_close_socket);
     * then close what is left (sockets curl closed without the callback). */
    curl_multi_cleanup(client->multi);
    client->multi = NULL;
    for (size_t fd = 0; fd < client->fd_cap; fd++)
        forget_watch(client, (curl_socket_t)fd);
    uv_timer_stop(&client->timer);
    uv_close((uv_handle_t *)&client->timer, on_handle_closed);
}
