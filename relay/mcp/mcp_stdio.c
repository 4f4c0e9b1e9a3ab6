/*
 * mcp_stdio.c — newline-delimited messages on stdin and stdout, on the loop.
 *
 * DESIGN
 * A host starts `outbox-relay mcp --stdio` with pipes (Node's spawn gives
 * socket pairs), a person tries it in a terminal, a script redirects a file
 * or /dev/null. So the input is a uv_pipe_t (pipes and sockets, made
 * non-blocking by libuv), a uv_tty_t (a terminal; libuv reopens it so that
 * the terminal's other readers keep their blocking mode), or, for a file,
 * uv_fs_read on the thread pool (epoll cannot watch a regular file). The
 * output is the same choice. Nothing here blocks the loop.
 *
 * Backpressure both ways. Output: every message is one uv_write (or one
 * queued uv_fs_write), counted in `pending` until it has left; past
 * max_output, reading stops, so a host that does not read our stdout makes
 * us stop reading its requests rather than buffer answers without end.
 * Input: lines are cut from what was read and delivered one at a time; the
 * owner may hold them (its requests in flight are at their limit), and
 * reading stops while it does, so a host that writes faster than calls end
 * fills the pipe and waits. The input buffer holds at most one line under
 * construction (max_line) and one read beyond it.
 *
 * A line past max_line is not a message we can answer (its id is in the
 * part we dropped): on_too_long, and its bytes are skipped to its newline.
 * A final line without a newline at end of input is delivered: the spec
 * says messages are delimited by newlines, and a host that ends with one
 * unterminated message meant it.
 *
 * Closing cuts what is still queued (uv_close cancels uv_write requests; a
 * uv_fs request in flight is waited for, as it cannot be cancelled once
 * started): the owner waits for on_drained before it closes when it wants
 * the answers out.
 */
#include "mcp/mcp_stdio.h"

#include "lib/strbuf.h"
#include "lib/xalloc.h"

#include <stdlib.h>
#include <string.h>

#define READ_CHUNK 65536

union stream_handle {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_pipe_t pipe;
    uv_tty_t tty;
};

struct out_write {
    uv_write_t req;
    struct mcp_stdio *io;
    size_t len;
    char data[]; /* the message and its newline */
};

struct mcp_stdio {
    uv_loop_t *loop;
    struct mcp_stdio_hooks hooks;
    size_t max_line, max_output;
    /* input */
    bool in_is_file;
    int in_fd;
    union stream_handle in;
    uv_fs_t in_req;  /* a file's read in flight (in_reading) */
    char *in_chunk;  /* its buffer */
    bool in_reading; /* a stream's uv_read_start is on, or a file's read is in flight */
    bool held, eof, eof_reported, skipping, started, delivering;
    int eof_error;
    struct strbuf buf; /* read, not delivered yet */
    size_t buf_off;    /* delivered up to here */
    /* output */
    bool out_is_file;
    int out_fd;
    union stream_handle out;
    uv_fs_t out_req;
    struct strbuf out_busy, out_next; /* a file's write in flight, and what waits for it */
    size_t out_busy_off;
    bool out_writing, out_failed;
    size_t pending;
    /* closing */
    int depth; /* inside a hook's caller: a close from the hook frees io on the way out */
    bool closing;
    int closes; /* handles and fs requests still to finish */
    void (*on_closed)(void *data);
    void *closed_data;
};

static void io_pump(struct mcp_stdio *io);
static void io_maybe_freed(struct mcp_stdio *io);

/* ---------------------------------------------------------------- input */

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    struct mcp_stdio *io = handle->data;
    if (io->in_chunk == NULL)
        io->in_chunk = xmalloc(READ_CHUNK);
    *buf = uv_buf_init(io->in_chunk, READ_CHUNK);
}

static void in_got(struct mcp_stdio *io, const char *data, size_t n)
{
    if (io->buf_off > 0 && io->buf_off == io->buf.len) {
        strbuf_reset(&io->buf);
        io->buf_off = 0;
    }
    strbuf_append(&io->buf, data, n);
}

static void in_ended(struct mcp_stdio *io, int error)
{
    io->eof = true;
    io->eof_error = error;
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct mcp_stdio *io = stream->data;
    if (nread > 0)
        in_got(io, buf->base, (size_t)nread);
    else if (nread < 0)
        in_ended(io, nread == UV_EOF ? 0 : (int)nread);
    if (nread != 0)
        io_pump(io);
}

static void on_file_read(uv_fs_t *req)
{
    struct mcp_stdio *io = req->data;
    ssize_t n = req->result;
    uv_fs_req_cleanup(req);
    io->in_reading = false;
    if (io->closing) {
        io->closes--;
        io_maybe_freed(io);
        return;
    }
    if (n > 0)
        in_got(io, io->in_chunk, (size_t)n);
    else
        in_ended(io, n == 0 ? 0 : (int)n);
    io_pump(io);
}

/* Reading goes on while the owner does not hold lines, no whole line waits,
 * and the output is not past its bound. */
static void in_set_reading(struct mcp_stdio *io, bool want)
{
    if (io->closing || io->eof)
        want = false;
    if (io->in_is_file) {
        if (!want || io->in_reading)
            return;
        if (io->in_chunk == NULL)
            io->in_chunk = xmalloc(READ_CHUNK);
        io->in_req.data = io;
        uv_buf_t b = uv_buf_init(io->in_chunk, READ_CHUNK);
        int rc = uv_fs_read(io->loop, &io->in_req, io->in_fd, &b, 1, -1, on_file_read);
        if (rc < 0) {
            in_ended(io, rc);
            return;
        }
        io->in_reading = true;
        return;
    }
    if (want == io->in_reading)
        return;
    if (want) {
        int rc = uv_read_start(&io->in.stream, on_alloc, on_read);
        if (rc < 0) {
            in_ended(io, rc);
            return;
        }
    } else {
        uv_read_stop(&io->in.stream);
    }
    io->in_reading = want;
}

/* Hooks may close io (the owner stops): io is freed only once the
 * outermost function that called a hook is done with it. Nothing touches
 * io after io_leave. */
static void io_enter(struct mcp_stdio *io)
{
    io->depth++;
}

static void io_leave(struct mcp_stdio *io)
{
    if (--io->depth == 0 && io->closing)
        io_maybe_freed(io);
}

static void io_pump_inner(struct mcp_stdio *io);

static void io_pump(struct mcp_stdio *io)
{
    io_enter(io);
    io_pump_inner(io);
    io_leave(io);
}

/* Delivers what can be delivered, then decides whether to read on. */
static void io_pump_inner(struct mcp_stdio *io)
{
    if (io->delivering || io->closing || !io->started)
        return; /* on_line wrote, held or released: the outer loop goes on */
    io->delivering = true;
    while (!io->held && !io->closing) {
        char *start = io->buf.data ? io->buf.data + io->buf_off : NULL;
        size_t avail = io->buf.len - io->buf_off;
        char *nl = avail ? memchr(start, '\n', avail) : NULL;
        if (io->skipping) {
            if (nl == NULL) {
                io->buf_off = io->buf.len;
                break;
            }
            io->skipping = false;
            io->buf_off += (size_t)(nl - start) + 1;
            continue;
        }
        if (nl == NULL && avail > io->max_line) {
            io->skipping = true;
            io->buf_off = io->buf.len;
            io->hooks.on_too_long(io->hooks.data);
            continue;
        }
        if (nl == NULL && !(io->eof && avail > 0))
            break;
        size_t len = nl ? (size_t)(nl - start) : avail;
        io->buf_off += nl ? len + 1 : len;
        if (len > io->max_line) {
            io->hooks.on_too_long(io->hooks.data);
            continue;
        }
        if (len > 0 && start[len - 1] == '\r')
            len--; /* a CRLF line end */
        if (len == 0)
            continue; /* an empty line is no message */
        io->hooks.on_line(io->hooks.data, start, len);
    }
    if (io->buf_off > 0 && io->buf_off == io->buf.len) {
        strbuf_reset(&io->buf);
        io->buf_off = 0;
    } else if (io->buf_off > READ_CHUNK) { /* keep the unread tail only */
        size_t rest = io->buf.len - io->buf_off;
        memmove(io->buf.data, io->buf.data + io->buf_off, rest);
        io->buf.len = rest;
        io->buf_off = 0;
    }
    io->delivering = false;
    if (io->closing)
        return;
    bool line_waits = io->buf.len > io->buf_off &&
                      memchr(io->buf.data + io->buf_off, '\n', io->buf.len - io->buf_off) != NULL;
    if (io->eof && !io->held && !line_waits && !io->eof_reported) {
        io->eof_reported = true;
        io->hooks.on_eof(io->hooks.data, io->eof_error);
        return;
    }
    in_set_reading(io, !io->held && !line_waits && io->pending <= io->max_output);
}

/* ---------------------------------------------------------------- output */

static void out_done_inner(struct mcp_stdio *io, size_t len, int error);

static void out_done(struct mcp_stdio *io, size_t len, int error)
{
    io_enter(io);
    out_done_inner(io, len, error);
    io_leave(io);
}

static void out_done_inner(struct mcp_stdio *io, size_t len, int error)
{
    io->pending -= len;
    if (error && error != UV_ECANCELED && !io->out_failed) {
        io->out_failed = true;
        if (!io->closing)
            io->hooks.on_write_error(io->hooks.data, error);
    }
    if (io->closing)
        return;
    if (io->pending <= io->max_output / 2)
        io_pump(io); /* reading may go on */
    if (io->pending == 0 && !io->closing)
        io->hooks.on_drained(io->hooks.data);
}

static void on_write(uv_write_t *req, int status)
{
    struct out_write *w = req->data;
    struct mcp_stdio *io = w->io;
    size_t len = w->len;
    free(w);
    out_done(io, len, status);
}

static void file_write_next(struct mcp_stdio *io);

static void on_file_write(uv_fs_t *req)
{
    struct mcp_stdio *io = req->data;
    ssize_t n = req->result;
    uv_fs_req_cleanup(req);
    io->out_writing = false;
    if (io->closing) {
        io->closes--;
        io_maybe_freed(io);
        return;
    }
    if (n < 0) {
        size_t len = io->out_busy.len - io->out_busy_off + io->out_next.len;
        strbuf_reset(&io->out_busy);
        strbuf_reset(&io->out_next);
        io->out_busy_off = 0;
        out_done(io, len, (int)n);
        return;
    }
    io->out_busy_off += (size_t)n;
    if (io->out_busy_off < io->out_busy.len) { /* a short write: the rest */
        file_write_next(io);
        return;
    }
    size_t len = io->out_busy.len;
    strbuf_reset(&io->out_busy);
    io->out_busy_off = 0;
    if (io->out_next.len)
        file_write_next(io);
    out_done(io, len, 0);
}

static void file_write_next(struct mcp_stdio *io)
{
    if (io->out_busy.len == 0) {
        struct strbuf t = io->out_busy;
        io->out_busy = io->out_next;
        io->out_next = t;
        io->out_busy_off = 0;
    }
    uv_buf_t b = uv_buf_init(io->out_busy.data + io->out_busy_off,
                             (unsigned int)(io->out_busy.len - io->out_busy_off));
    io->out_req.data = io;
    int rc = uv_fs_write(io->loop, &io->out_req, io->out_fd, &b, 1, -1, on_file_write);
    if (rc < 0) {
        size_t len = io->out_busy.len - io->out_busy_off;
        strbuf_reset(&io->out_busy);
        io->out_busy_off = 0;
        out_done(io, len, rc);
        return;
    }
    io->out_writing = true;
}

void mcp_stdio_write_line(mcp_stdio_t *io, const char *message, size_t len)
{
    if (io->out_failed || io->closing)
        return;
    io->pending += len + 1;
    if (io->out_is_file) {
        strbuf_append(&io->out_next, message, len);
        strbuf_append(&io->out_next, "\n", 1);
        if (!io->out_writing)
            file_write_next(io);
        return;
    }
    struct out_write *w = xmalloc(sizeof(*w) + len + 1);
    w->io = io;
    w->len = len + 1;
    memcpy(w->data, message, len);
    w->data[len] = '\n';
    w->req.data = w;
    uv_buf_t b = uv_buf_init(w->data, (unsigned int)(len + 1));
    int rc = uv_write(&w->req, &io->out.stream, &b, 1, on_write);
    if (rc < 0) { /* its callback will not run */
        free(w);
        out_done(io, len + 1, rc);
        return;
    }
    if (io->pending > io->max_output)
        in_set_reading(io, false); /* io_pump starts it again once the output drained */
}

size_t mcp_stdio_pending(const mcp_stdio_t *io)
{
    return io->pending;
}

/* ---------------------------------------------------------------- life */

/* *inited: a handle was made (and must be closed, also on failure). */
static int open_stream(uv_loop_t *loop, int fd, bool readable, union stream_handle *h,
                       bool *is_file, bool *inited)
{
    *is_file = false;
    *inited = false;
    switch (uv_guess_handle(fd)) {
    case UV_TTY: {
        int rc = uv_tty_init(loop, &h->tty, fd, readable);
        *inited = rc == 0;
        return rc;
    }
    case UV_NAMED_PIPE:
    case UV_TCP: {
        int rc = uv_pipe_init(loop, &h->pipe, 0);
        if (rc < 0)
            return rc;
        *inited = true;
        return uv_pipe_open(&h->pipe, fd);
    }
    case UV_FILE:
        *is_file = true;
        return 0;
    default:
        return UV_EBADF;
    }
}

static void on_open_failed_closed(uv_handle_t *handle)
{
    struct mcp_stdio *io = handle->data;
    if (--io->closes == 0)
        free(io);
}

mcp_stdio_t *mcp_stdio_open(uv_loop_t *loop, int in_fd, int out_fd, size_t max_line,
                            size_t max_output, const struct mcp_stdio_hooks *hooks, int *uv_error)
{
    struct mcp_stdio *io = xcalloc(1, sizeof(*io));
    io->loop = loop;
    io->hooks = *hooks;
    io->max_line = max_line;
    io->max_output = max_output;
    io->in_fd = in_fd;
    io->out_fd = out_fd;
    bool in_inited, out_inited = false;
    int rc = open_stream(loop, in_fd, true, &io->in, &io->in_is_file, &in_inited);
    if (rc == 0)
        rc = open_stream(loop, out_fd, false, &io->out, &io->out_is_file, &out_inited);
    io->in.handle.data = io;
    io->out.handle.data = io;
    if (rc == 0)
        return io;
    *uv_error = rc;
    /* what was made is closed; io goes with the last close callback */
    io->closing = true;
    io->closes = (int)in_inited + (int)out_inited;
    if (in_inited)
        uv_close(&io->in.handle, on_open_failed_closed);
    if (out_inited)
        uv_close(&io->out.handle, on_open_failed_closed);
    if (io->closes == 0)
        free(io);
    return NULL;
}

void mcp_stdio_start(mcp_stdio_t *io)
{
    io->started = true;
    io_pump(io);
}

void mcp_stdio_hold(mcp_stdio_t *io, bool hold)
{
    if (io->held == hold)
        return;
    io->held = hold;
    if (!hold)
        io_pump(io);
    else if (!io->in_is_file)
        in_set_reading(io, false);
}

static void io_maybe_freed(struct mcp_stdio *io)
{
    if (io->closes > 0 || io->depth > 0)
        return;
    void (*cb)(void *) = io->on_closed;
    void *data = io->closed_data;
    strbuf_free(&io->buf);
    strbuf_free(&io->out_busy);
    strbuf_free(&io->out_next);
    free(io->in_chunk);
    free(io);
    if (cb)
        cb(data);
}

static void on_handle_closed(uv_handle_t *handle)
{
    struct mcp_stdio *io = handle->data;
    io->closes--;
    io_maybe_freed(io);
}

void mcp_stdio_close(mcp_stdio_t *io, void (*on_closed)(void *data), void *data)
{
    io->closing = true;
    io->on_closed = on_closed;
    io->closed_data = data;
    io->closes = 1; /* this function's own, released at its end */
    if (io->in_is_file) {
        if (io->in_reading)
            io->closes++; /* on_file_read finishes it */
    } else {
        io->closes++;
        uv_close(&io->in.handle, on_handle_closed);
    }
    if (io->out_is_file) {
        if (io->out_writing)
            io->closes++;
    } else {
        io->closes++;
        uv_close(&io->out.handle, on_handle_closed);
    }
    io->closes--;
    io_maybe_freed(io);
}
