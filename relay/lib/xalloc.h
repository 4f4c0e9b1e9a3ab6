/*
 * xalloc.h — allocation that never returns NULL.
 *
 * Out of memory, a daemon has nothing sensible left to do: carrying on with a
 * NULL (a lost outcome, a half-built request) is worse than a crash that the
 * supervisor restarts, after which every lease is taken over as ambiguous
 * and nothing is lost. So every allocation in relay/ goes through these, and
 * aborts when the system refuses; strbuf grows the same way.
 *
 * Three places handle a NULL on purpose and call malloc's family directly:
 * http_client.c's socket watches (curl's socket callback answers -1, which fails
 * the transfers, not the relay), and strbuf_steal and strbuf_shrink, which
 * keep the larger block when a smaller one cannot be had.
 */
#ifndef OUTBOX_XALLOC_H
#define OUTBOX_XALLOC_H

#include <stdlib.h>
#include <string.h>

static inline void *xalloc_check(void *p)
{
    if (p == NULL)
        abort();
    return p;
}

static inline void *xmalloc(size_t n)
{
    return xalloc_check(malloc(n ? n : 1));
}

static inline void *xcalloc(size_t count, size_t size)
{
    return xalloc_check(calloc(count ? count : 1, size ? size : 1));
}

static inline void *xrealloc(void *p, size_t n)
{
    return xalloc_check(realloc(p, n ? n : 1));
}

static inline char *xstrdup(const char *s)
{
    return xalloc_check(strdup(s));
}

static inline char *xstrndup(const char *s, size_t n)
{
    return xalloc_check(strndup(s, n));
}

#endif
