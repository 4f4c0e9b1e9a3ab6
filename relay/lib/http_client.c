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
 *
 * Waiting for a connection (http_client_set_connection_wait; issue 40,
 * docs/performance.md "Memory"). The relay's claims land in bursts of a
 * batch, and libcurl opens a connection for every HTTP/1.1 transfer that
 * finds none idle: over TLS the relay held 260-700 connections (about
 * 51 KiB each) where the deliveries needed 160-210. With the wait set, a
 * transfer added while no connection is idle (open connections minus the
 * transfers on the multi) and at least HTTP_CLIENT_EAGER_CONNECTIONS are on
 * the multi waits here, first in first out, and goes to curl when:
 *  - a transfer ends (its connection goes back to curl's cache): as many
 *    waiting transfers go as there are connections idle by the count; or
 *  - a loop turn after the one it began to wait in ended no transfer while
 *    curl served its sockets (connections being made, requests written), or
 *    polled without blocking and found nothing: then up to
 *    HTTP_CLIENT_OPEN_PER_TURN go per such turn, and open connections.
 * The second rule tells a busy relay from a slow target without a clock. A
 * busy relay's transfers wait for the loop, not for the target: their
 * answers are in the sockets already, so a turn's poll ends some of them,
 * and their connections serve the waiting. A slow target's transfers wait
 * for the target: a turn that served their sockets ended none, so more
 * connections are what its requests need, and they get them within a few
 * turns (500 in about 15: the connections being opened wake the loop), not
 * after a delay. A turn woken by something else alone (the database, a
 * timer) says nothing of the target and does not count. The turn after
 * transfers began to wait, or went past a free connection, polls without
 * blocking (an idle handle), so that the waiting are looked at again even
 * when nothing of curl's would wake the loop; other turns block as usual.
 * So every waiting transfer goes, with an ended transfer's connection or in
 * a turn that ended none, and a waiting queue never sleeps through a turn:
 * at most one non-blocking turn per HTTP_CLIENT_OPEN_PER_TURN of them. Its own timeout
 * starts when it reaches curl. The count is of all hosts together: an idle
 * connection to another target lets a transfer through, which then opens
 * its own (as without the wait). The relay's h2 multi has no wait: its
 * transfers share a few connections as streams.
 * Tried before (942ae56, backed out in 430f01f): waiting up to 250 ms for a
 * free connection; a slow target then got its connections late.
 */
#include "lib/http_client.h"

#include "lib/xalloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

struct http_client {
    uv_loop_t *loop;
    CURLM *multi;
    uv_timer_t timer;
    http_done_cb on_done;
    int open_handles; /* the timer, the turn check and idle, plus live socket polls */
    bool closing;
    void (*on_closed)(void *data);
    void *closed_data;
    struct fd_slot *fds; /* indexed by descriptor */
    size_t fd_cap;
    /* waiting for a connection (see the top of this file) */
    bool wait_for_connections;
    long connections;        /* open connection sockets */
    long running;            /* transfers on the multi */
    struct waiting *waiting; /* first in, first out */
    struct waiting *waiting_tail;
    size_t waiting_count;
    uint64_t turn;          /* loop turns seen by turn_check while transfers waited */
    bool ended_this_turn;   /* a transfer ended since the last turn_check */
    bool moved_this_turn;   /* curl had a socket of a transfer to serve since then */
    bool poll_not_blocking; /* turn_idle was active for this turn's poll */
    uv_check_t turn_check;
    uv_idle_t turn_idle; /* keeps the poll from blocking while transfers wait */
};

struct waiting {
    CURL *easy;
    void *data;
    uint64_t turn; /* the turn it began to wait in */
    struct waiting *next;
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

static int start_waiting(http_client_t *client, bool turn_ended_none);

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
        curl_easy_setopt(easy, CURLOPT_PRIVATE, NULL); /* off the multi (http_client_remove) */
        client->running--;
        client->ended_this_turn = true;
        client->on_done(easy, result, data);
        start_waiting(client, false);
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
    client->moved_this_turn = true;
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
    client->connections++;
    return fd;
}

/* CURLOPT_CLOSESOCKETFUNCTION: curl closes a connection's socket. */
static int on_curl_close_socket(void *clientp, curl_socket_t fd)
{
    http_client_t *client = clientp;
    forget_watch(client, fd);
    if (fd >= 0 && (size_t)fd < client->fd_cap && client->fds[fd].connection) {
        client->fds[fd].connection = false;
        client->connections--;
    }
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
    uv_check_init(loop, &client->turn_check);
    client->turn_check.data = client;
    uv_idle_init(loop, &client->turn_idle);
    client->turn_idle.data = client;
    client->open_handles = 3;
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

/* Hands a transfer to curl (false: curl refused it). */
static bool start_transfer(http_client_t *client, CURL *easy, void *data)
{
    curl_easy_setopt(easy, CURLOPT_PRIVATE, data);
    curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, on_curl_open_socket);
    curl_easy_setopt(easy, CURLOPT_OPENSOCKETDATA, client);
    curl_easy_setopt(easy, CURLOPT_CLOSESOCKETFUNCTION, on_curl_close_socket);
    curl_easy_setopt(easy, CURLOPT_CLOSESOCKETDATA, client);
    if (curl_multi_add_handle(client->multi, easy) != CURLM_OK) {
        curl_easy_setopt(easy, CURLOPT_PRIVATE, NULL);
        return false;
    }
    client->running++;
    return true;
}

/* A connection is idle, or few transfers are on the multi: one may go to
 * curl now. Transfers, not connections, are counted against the open
 * connections: those added in one turn open theirs in the next. */
static bool connection_free(const http_client_t *client)
{
    return client->running < HTTP_CLIENT_EAGER_CONNECTIONS || client->connections > client->running;
}

/* The waiting transfers that may go now, first in first out: while a
 * connection is free; and when turn_ended_none, up to
 * HTTP_CLIENT_OPEN_PER_TURN more of those that waited since an earlier
 * turn (they open connections). Returns how many went past a free
 * connection. A transfer curl refuses ends at once through the done
 * callback (CURLE_FAILED_INIT), as the caller's own add would have failed. */
static int start_waiting(http_client_t *client, bool turn_ended_none)
{
    int opening = turn_ended_none ? HTTP_CLIENT_OPEN_PER_TURN : 0;
    int opened = 0;
    while (client->waiting && !client->closing) {
        if (!connection_free(client)) {
            if (opened == opening || client->waiting->turn >= client->turn)
                break;
            opened++;
        }
        struct waiting *w = client->waiting;
        client->waiting = w->next;
        if (client->waiting == NULL)
            client->waiting_tail = NULL;
        client->waiting_count--;
        CURL *easy = w->easy;
        void *data = w->data;
        free(w);
        if (!start_transfer(client, easy, data))
            client->on_done(easy, CURLE_FAILED_INIT, data);
    }
    return opened;
}

static void on_turn_idle(uv_idle_t *idle)
{
    (void)idle; /* its being active is what counts: the poll does not block */
}

/* After each loop turn's poll, while transfers wait (see the top of this
 * file). A turn ended none when no transfer ended in it and either curl
 * served a socket of a transfer in it (connections being made, requests
 * written: progress, no answer) or it polled without blocking and found
 * nothing. A turn woken by something else alone (the database, a timer) says
 * nothing about the target. The idle handle makes the poll look without
 * blocking in the turn after one in which transfers began to wait or went
 * past a free connection: the waiting are looked at again even when the
 * transfers let go would not wake the loop (they found idle connections
 * that the count, which is of all hosts, did not see). */
static void on_turn_check(uv_check_t *check)
{
    http_client_t *client = check->data;
    bool ended_none =
        !client->ended_this_turn && (client->moved_this_turn || client->poll_not_blocking);
    client->ended_this_turn = false;
    client->moved_this_turn = false;
    int opened = start_waiting(client, ended_none);
    client->poll_not_blocking =
        client->waiting && (opened > 0 || client->waiting_tail->turn == client->turn);
    if (client->waiting == NULL)
        uv_check_stop(&client->turn_check);
    if (client->poll_not_blocking)
        uv_idle_start(&client->turn_idle, on_turn_idle); /* a no-op when active */
    else
        uv_idle_stop(&client->turn_idle);
    client->turn++;
}

bool http_client_add(http_client_t *client, CURL *easy, void *data)
{
    if (!client->wait_for_connections || (client->waiting == NULL && connection_free(client)))
        return start_transfer(client, easy, data);
    struct waiting *w = malloc(sizeof(*w));
    if (w == NULL)
        return start_transfer(client, easy, data);
    *w = (struct waiting){easy, data, client->turn, NULL};
    if (client->waiting_tail)
        client->waiting_tail->next = w;
    else
        client->waiting = w;
    client->waiting_tail = w;
    client->waiting_count++;
    uv_check_start(&client->turn_check, on_turn_check); /* no-ops when active */
    uv_idle_start(&client->turn_idle, on_turn_idle);
    return true;
}

void http_client_set_connection_wait(http_client_t *client, bool on)
{
    client->wait_for_connections = on;
}

size_t http_client_waiting(const http_client_t *client)
{
    return client->waiting_count;
}

void http_client_remove(http_client_t *client, CURL *easy)
{
    struct waiting *prev = NULL;
    for (struct waiting *w = client->waiting; w; prev = w, w = w->next) {
        if (w->easy != easy)
            continue;
        if (prev)
            prev->next = w->next;
        else
            client->waiting = w->next;
        if (client->waiting_tail == w)
            client->waiting_tail = prev;
        client->waiting_count--;
        free(w);
        return; /* the turn check stops itself once none waits */
    }
    /* On the multi: its private pointer is set (start_transfer) until it
     * ends or is removed; a transfer never added has none to remove. */
    void *data = NULL;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&data);
    if (data == NULL)
        return;
    curl_multi_remove_handle(client->multi, easy);
    curl_easy_setopt(easy, CURLOPT_PRIVATE, NULL);
    client->running--;
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
    while (client->waiting) { /* the caller removed them all; be sure */
        struct waiting *w = client->waiting;
        client->waiting = w->next;
        free(w);
    }
    client->waiting_tail = NULL;
    client->waiting_count = 0;
    uv_check_stop(&client->turn_check);
    uv_close((uv_handle_t *)&client->turn_check, on_handle_closed);
    uv_idle_stop(&client->turn_idle);
    uv_close((uv_handle_t *)&client->turn_idle, on_handle_closed);
}
