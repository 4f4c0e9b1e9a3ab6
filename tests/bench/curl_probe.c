/*
 * curl_probe — what libcurl alone costs per delivery (tests/bench/run.sh,
 * headline scenario; issue 17, item 3).
 *
 *   curl_probe --url URL [--requests N] [--in-flight K] [--prefix P]
 *              [--max-host-connections C] [--cacert FILE]
 *
 * Sends N POST requests to URL with libcurl's multi interface, at most K at
 * once, and prints one line:
 *   requests N ok N errors E connections C wall_s W user_s U sys_s S maxrss_kb M
 * user/sys/maxrss from getrusage(RUSAGE_SELF) at the end (the whole process,
 * start-up included, as the bench takes the relay's from wait4), wall from
 * the first request to the last answer. Exit status 1 if any request did
 * not end with HTTP 200.
 *
 * Each request is what the relay makes of an intent (relay/deliver.c,
 * relay/targets.c), minus everything that is not libcurl:
 *   - an easy handle from a pool, curl_easy_reset() after each use;
 *   - a header list made per request: Content-Type: application/json,
 *     "Expect:" (no 100-continue), Idempotency-Key: <key> (the target's
 *     default key_header);
 *   - the options of set_common_options(): http/https only, timeouts
 *     (10 s, the targets' default), no signals, no redirects, TLS verification,
 *     TCP keep-alive and TCP_NODELAY, the relay's User-Agent, a write callback
 *     copying the body into a capped buffer, a header callback looking for
 *     Retry-After, an error buffer, libcurl's least upload buffer (16 KiB:
 *     over TLS libcurl copies each request into it);
 *   - POSTFIELDS + POSTFIELDSIZE_LARGE of a JSON payload of the bench's shape;
 *   - afterwards CURLINFO_REQUEST_SIZE and CURLINFO_RESPONSE_CODE.
 * The multi handle is set up as relay/lib/http_client.c sets it up: socket and timer
 * callbacks driving curl_multi_socket_action, CURLMOPT_MAXCONNECTS 1024,
 * nothing else (no pipelining setting: HTTP/1.1, one request per connection
 * at a time, so K in flight means up to K connections). Like http_client.c, the
 * connection sockets are opened and closed through curl's socket callbacks
 * and a kept-alive connection stays registered for input while it idles in
 * curl's cache (no epoll_ctl per request). The loop is bare epoll, not
 * libuv: this is the floor the relay is compared with.
 *
 * --max-host-connections C sets CURLMOPT_MAX_HOST_CONNECTIONS (the relay
 * sets none; 0, the default, is none): K transfers wait for C connections.
 * Not used by the bench; it tells whether a cost follows the number of
 * transfers or the number of connections.
 *
 * --cacert FILE sets CURLOPT_CAINFO and unsets CURLOPT_CAPATH, as the relay
 * does for a target with ca_file (the headline over TLS, issue 26). Like the relay, every request
 * has CURLOPT_CA_CACHE_TIMEOUT 300 and one share object for TLS sessions
 * (CURL_LOCK_DATA_SSL_SESSION), so that a new connection may resume a
 * session another easy handle made.
 */
#include <curl/curl.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct watch {
    bool connection; /* opened through open_socket, not closed yet */
    bool registered; /* in the epoll set */
    bool parked;     /* curl said REMOVE: idle in curl's connection cache */
    unsigned events; /* EPOLLIN/EPOLLOUT registered */
};

struct request {
    CURL *easy;
    struct curl_slist *headers;
    char payload[256];
    size_t payload_len;
    char body[512];
    size_t body_len;
    long retry_after;
    char error[CURL_ERROR_SIZE];
};

static int epfd;
static CURLM *multi;
static struct watch *watches;
static size_t watch_cap;
static double deadline = -1; /* curl's timer, CLOCK_MONOTONIC seconds; -1 none */
static long connections;

static struct watch *watch_of(curl_socket_t fd)
{
    if (fd < 0)
        return NULL;
    if ((size_t)fd >= watch_cap) {
        size_t cap = watch_cap ? watch_cap : 1024;
        while (cap <= (size_t)fd)
            cap *= 2;
        struct watch *grown = realloc(watches, cap * sizeof(*grown));
        if (grown == NULL)
            return NULL;
        memset(grown + watch_cap, 0, (cap - watch_cap) * sizeof(*grown));
        watches = grown;
        watch_cap = cap;
    }
    return &watches[fd];
}

static void watch_set(curl_socket_t fd, struct watch *w, unsigned events)
{
    if (events == w->events && w->registered)
        return;
    struct epoll_event ev = {.events = events, .data.fd = fd};
    if (!w->registered) {
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0)
            w->registered = true;
    } else if (events == 0) {
        epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
        w->registered = false;
    } else {
        epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev);
    }
    w->events = w->registered ? events : 0;
}

static curl_socket_t open_socket(void *clientp, curlsocktype purpose, struct curl_sockaddr *a)
{
    (void)clientp;
    (void)purpose;
    curl_socket_t fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
    struct watch *w = watch_of(fd);
    if (fd != CURL_SOCKET_BAD && w == NULL) {
        close(fd);
        return CURL_SOCKET_BAD;
    }
    if (w) {
        *w = (struct watch){.connection = true};
        connections++;
    }
    return fd;
}

static int close_socket(void *clientp, curl_socket_t fd)
{
    (void)clientp;
    struct watch *w = watch_of(fd);
    if (w) {
        if (w->registered)
            epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
        *w = (struct watch){0};
    }
    return close(fd);
}

static int socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    (void)easy;
    (void)userp;
    (void)socketp;
    struct watch *w = watch_of(fd);
    if (w == NULL)
        return -1;
    if (what == CURL_POLL_REMOVE) {
        if (!w->connection) { /* the resolver's sockets: curl closes them itself */
            watch_set(fd, w, 0);
            return 0;
        }
        w->parked = true; /* as relay/lib/http_client.c: stays registered for input if it was */
        if (w->events != EPOLLIN)
            watch_set(fd, w, 0);
        return 0;
    }
    unsigned events = 0;
    if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
        events |= EPOLLIN;
    if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
        events |= EPOLLOUT;
    w->parked = false;
    watch_set(fd, w, events);
    return 0;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int timer_cb(CURLM *m, long ms, void *userp)
{
    (void)m;
    (void)userp;
    deadline = ms < 0 ? -1 : mono_s() + (double)ms / 1e3;
    return 0;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *userp)
{
    struct request *r = userp;
    size_t n = size * nmemb, room = sizeof(r->body) - r->body_len;
    memcpy(r->body + r->body_len, data, n < room ? n : room); /* bounded copy, as the relay's */
    r->body_len += n < room ? n : room;
    return n;
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *userp)
{
    struct request *r = userp;
    size_t n = size * nmemb;
    static const char name[] = "retry-after:";
    if (n > sizeof(name) - 1 && n < 256 && strncasecmp(data, name, sizeof(name) - 1) == 0)
        r->retry_after = strtol(data + sizeof(name) - 1, NULL, 10);
    return n;
}

static const char *url, *prefix = "probe:", *cacert;
static CURLSH *tls_sessions;
static long sent, done_ok, errors;

static void start(struct request *r, long n)
{
    char line[320];
    r->body_len = 0;
    r->retry_after = -1;
    r->error[0] = '\0';
    /* The bench's payload (run.sh PAYLOAD_SQL), as jsonb prints it. */
    r->payload_len = (size_t)snprintf(r->payload, sizeof(r->payload),
                                      "{\"step\": %ld, \"reason\": \"duplicate charge\", "
                                      "\"run_id\": \"bench-run\", \"account\": %ld, "
                                      "\"currency\": \"EUR\", \"amount_cents\": %ld}",
                                      n, n % 1000, 2500 + n % 100);
    r->headers = curl_slist_append(NULL, "Content-Type: application/json");
    r->headers = curl_slist_append(r->headers, "Expect:");
    snprintf(line, sizeof(line), "Idempotency-Key: %s%ld", prefix, n);
    r->headers = curl_slist_append(r->headers, line);
    CURL *e = r->easy;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 10000L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
    if (cacert) { /* as the relay: that file alone, no CA directory */
        curl_easy_setopt(e, CURLOPT_CAINFO, cacert);
        curl_easy_setopt(e, CURLOPT_CAPATH, NULL);
    }
    curl_easy_setopt(e, CURLOPT_CA_CACHE_TIMEOUT, 300L);
    curl_easy_setopt(e, CURLOPT_SHARE, tls_sessions);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "outbox-relay/0.1");
    curl_easy_setopt(e, CURLOPT_UPLOAD_BUFFERSIZE, 16384L);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->error);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->payload);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->payload_len);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(e, CURLOPT_PRIVATE, r);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, open_socket);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, close_socket);
    curl_multi_add_handle(multi, e);
}

static long requests = 100000, in_flight_max = 1024, max_host_connections = 0;

static void drain_finished(void)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        CURL *e = msg->easy_handle;
        struct request *r = NULL;
        long status = 0, request_size = 0;
        curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&r);
        curl_easy_getinfo(e, CURLINFO_REQUEST_SIZE, &request_size);
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
        if (msg->data.result == CURLE_OK && status == 200 && request_size > 0) {
            done_ok++;
        } else {
            if (errors < 5)
                fprintf(stderr, "curl_probe: %s (HTTP %ld)\n",
                        r->error[0] ? r->error : curl_easy_strerror(msg->data.result), status);
            errors++;
        }
        curl_multi_remove_handle(multi, e);
        curl_slist_free_all(r->headers);
        r->headers = NULL;
        curl_easy_reset(e);
        if (sent < requests)
            start(r, ++sent);
    }
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--url") && i + 1 < argc)
            url = argv[++i];
        else if (!strcmp(argv[i], "--requests") && i + 1 < argc)
            requests = strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--in-flight") && i + 1 < argc)
            in_flight_max = strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--prefix") && i + 1 < argc)
            prefix = argv[++i];
        else if (!strcmp(argv[i], "--max-host-connections") && i + 1 < argc)
            max_host_connections = strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--cacert") && i + 1 < argc)
            cacert = argv[++i];
        else
            url = NULL, i = argc;
    }
    if (url == NULL || requests < 1 || in_flight_max < 1) {
        fprintf(stderr, "usage: curl_probe --url URL [--requests N] [--in-flight K] [--prefix P] "
                        "[--max-host-connections C] [--cacert FILE]\n");
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    epfd = epoll_create1(EPOLL_CLOEXEC);
    multi = curl_multi_init();
    tls_sessions = curl_share_init();
    if (tls_sessions)
        curl_share_setopt(tls_sessions, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    if (epfd < 0 || multi == NULL) {
        perror("curl_probe: init");
        return 1;
    }
    curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
    curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, timer_cb);
    curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, 1024L);
    if (max_host_connections > 0)
        curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, max_host_connections);

    long k = in_flight_max < requests ? in_flight_max : requests;
    struct request *pool = calloc((size_t)k, sizeof(*pool));
    if (pool == NULL) {
        perror("curl_probe: calloc");
        return 1;
    }
    double t0 = mono_s();
    for (long i = 0; i < k; i++) {
        pool[i].easy = curl_easy_init();
        if (pool[i].easy == NULL) {
            fprintf(stderr, "curl_probe: curl_easy_init failed\n");
            return 1;
        }
        start(&pool[i], ++sent);
    }
    struct epoll_event evs[256];
    int running = 1;
    while (done_ok + errors < requests) {
        int wait_ms = 1000;
        if (deadline >= 0) {
            double left_ms = (deadline - mono_s()) * 1e3;
            wait_ms = left_ms <= 0 ? 0 : left_ms >= 1000 ? 1000 : (int)left_ms + 1;
        }
        int n = epoll_wait(epfd, evs, 256, wait_ms);
        if (n < 0 && errno != EINTR) {
            perror("curl_probe: epoll_wait");
            return 1;
        }
        for (int i = 0; i < n; i++) {
            curl_socket_t fd = evs[i].data.fd;
            struct watch *w = watch_of(fd);
            if (w && w->parked) {
                /* An idle connection became readable: the server closed it.
                 * Stop watching; curl finds it dead before reusing it. */
                watch_set(fd, w, 0);
                continue;
            }
            int flags = 0;
            if (evs[i].events & (EPOLLERR | EPOLLHUP))
                flags |= CURL_CSELECT_ERR;
            if (evs[i].events & EPOLLIN)
                flags |= CURL_CSELECT_IN;
            if (evs[i].events & EPOLLOUT)
                flags |= CURL_CSELECT_OUT;
            curl_multi_socket_action(multi, fd, flags, &running);
            drain_finished();
        }
        if (deadline >= 0 && (n == 0 || mono_s() >= deadline)) {
            /* curl's timer is due */
            deadline = -1;
            curl_multi_socket_action(multi, CURL_SOCKET_TIMEOUT, 0, &running);
            drain_finished();
        }
    }
    double wall = mono_s() - t0;
    for (long i = 0; i < k; i++)
        curl_easy_cleanup(pool[i].easy);
    curl_multi_cleanup(multi);
    curl_global_cleanup();
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("requests %ld ok %ld errors %ld connections %ld wall_s %.6f user_s %.6f sys_s %.6f "
           "maxrss_kb %ld\n",
           requests, done_ok, errors, connections, wall,
           (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6,
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6, ru.ru_maxrss);
    free(pool);
    free(watches);
    return errors == 0 ? 0 : 1;
}
