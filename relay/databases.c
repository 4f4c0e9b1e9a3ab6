/*
 * databases.c — reads the file of --databases (databases.h).
 *
 * Why a file and not a flag per database: a relay may serve hundreds of
 * databases, and a Kubernetes Secret mounted as a file is how their
 * connection strings reach a pod without being in its spec; SIGHUP re-reads
 * it (relay.c) as PgBouncer re-reads its [databases]. The read is a plain
 * read(2) of a file of at most 1 MiB from a local mount, done at start and
 * on SIGHUP; it is the only file the loop reads.
 */
#include "databases.h"

#include "lib/xalloc.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool databases_name_valid(const char *name)
{
    size_t n = strlen(name);
    if (n < 1 || n > DATABASES_NAME_MAX)
        return false;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '-'))
            return false;
    return true;
}

void databases_free(struct database_list *list)
{
    for (size_t i = 0; i < list->count; i++) {
        free(list->items[i].name);
        free(list->items[i].conninfo);
    }
    free(list->items);
    list->items = NULL;
    list->count = 0;
}

const struct database_line *databases_find(const struct database_list *list, const char *name)
{
    for (size_t i = 0; i < list->count; i++)
        if (strcmp(list->items[i].name, name) == 0)
            return &list->items[i];
    return NULL;
}

const char *databases_secret(const char *name)
{
    char env[16 + DATABASES_NAME_MAX + 1];
    size_t n = (size_t)snprintf(env, sizeof(env), "OUTBOX_SECRET_");
    for (const char *p = name; *p && n + 1 < sizeof(env); p++)
        env[n++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
    env[n] = '\0';
    return getenv(env);
}

/* One line (NUL-terminated, without its newline): appended to out, or
 * skipped when blank or a comment. */
static bool databases_line(char *line, size_t number, struct database_list *out, char *error,
                           size_t size)
{
    while (isspace((unsigned char)*line))
        line++;
    size_t len = strlen(line);
    while (len > 0 && isspace((unsigned char)line[len - 1]))
        line[--len] = '\0';
    if (len == 0 || *line == '#')
        return true;
    char *rest = line;
    while (*rest && !isspace((unsigned char)*rest))
        rest++;
    if (*rest)
        *rest++ = '\0';
    while (isspace((unsigned char)*rest))
        rest++;
    if (!databases_name_valid(line)) {
        snprintf(error, size, "line %zu: the name must match ^[a-z0-9_-]{1,63}$", number);
        return false;
    }
    if (*rest == '\0') {
        snprintf(error, size, "line %zu (%s): no connection string after the name", number, line);
        return false;
    }
    if (databases_find(out, line)) {
        snprintf(error, size, "line %zu: the name %s is there twice", number, line);
        return false;
    }
    out->items = xrealloc(out->items, (out->count + 1) * sizeof(out->items[0]));
    out->items[out->count].name = xstrdup(line);
    out->items[out->count].conninfo = xstrdup(rest);
    out->count++;
    return true;
}

bool databases_read(const char *path, struct database_list *out, char *error, size_t size)
{
    databases_free(out);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(error, size, "cannot read %s: %s", path, strerror(errno));
        return false;
    }
    char *text = xmalloc(DATABASES_MAX_FILE_BYTES + 1);
    size_t got = fread(text, 1, DATABASES_MAX_FILE_BYTES + 1, f);
    bool failed = ferror(f) != 0;
    fclose(f);
    bool ok = !failed && got <= DATABASES_MAX_FILE_BYTES;
    if (!ok)
        snprintf(error, size, failed ? "cannot read %s" : "%s is over 1 MiB", path);
    text[ok ? got : 0] = '\0';
    size_t number = 0;
    for (char *line = text; ok && line && *line;) {
        char *next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        number++;
        ok = databases_line(line, number, out, error, size);
        line = next;
    }
    free(text);
    if (ok && out->count == 0) {
        snprintf(error, size, "%s names no database", path);
        ok = false;
    }
    if (!ok)
        databases_free(out);
    return ok;
}
