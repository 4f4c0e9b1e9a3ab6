/*
 * mcp_stdio.h — the bytes of the MCP stdio transport: newline-delimited
 * messages read from one file descriptor (stdin) and written to another
 * (stdout), on the loop, without a blocking call.
 *
 * What it owns: reading (a pipe or socket as a uv_pipe_t, a terminal as a
 * uv_tty_t, a file or /dev/null with uv_fs_read), cutting the input into
 * lines of at most max_line bytes, holding lines back while the owner says
 * so or while too much output waits, writing each message and its newline
 * (uv_write, or uv_fs_write for a file) in order, and closing. What it does
 * not own: what a line means (relay/mcp/mcp_server.c, which dispatches it
 * as the HTTP transport's requests are).
 */
#ifndef OUTBOX_MCP_STDIO_H
#define OUTBOX_MCP_STDIO_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

typedef struct mcp_stdio mcp_stdio_t;

struct mcp_stdio_hooks {
    void *data;
    /* One message, without its newline (a final line without one counts). */
    void (*on_line)(void *data, const char *line, size_t len);
    /* A line longer than max_line: its bytes are dropped up to its newline. */
    void (*on_too_long)(void *data);
    /* The input ended (end of file, or a read error: error is then a
     * uv error, else 0), after every line before it was delivered. */
    void (*on_eof)(void *data, int error);
    /* The output is gone (EPIPE: the reader closed it): later writes are
     * dropped. Once. */
    void (*on_write_error)(void *data, int error);
    /* Every message written so far has left (the output queue is empty). */
    void (*on_drained)(void *data);
};

/* NULL with *uv_error set when a descriptor cannot be used. */
mcp_stdio_t *mcp_stdio_open(uv_loop_t *loop, int in_fd, int out_fd, size_t max_line,
                            size_t max_output, const struct mcp_stdio_hooks *hooks, int *uv_error);
/* Starts (or goes on) delivering lines. */
void mcp_stdio_start(mcp_stdio_t *io);
/* The owner's own reason to hold lines back (its requests in flight are at
 * their limit); false lets them come again. Lines already read wait, and
 * reading stops, so a writer that goes on fills the pipe and waits. */
void mcp_stdio_hold(mcp_stdio_t *io, bool hold);
/* Writes message (one line of JSON, no newline in it) and a newline. */
void mcp_stdio_write_line(mcp_stdio_t *io, const char *message, size_t len);
/* Bytes written but not gone yet. */
size_t mcp_stdio_pending(const mcp_stdio_t *io);
/* Stops reading and closes; what is still queued for output is cut.
 * on_closed runs from the loop, then io is freed. */
void mcp_stdio_close(mcp_stdio_t *io, void (*on_closed)(void *data), void *data);

#endif
