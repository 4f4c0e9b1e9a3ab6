/*
 * databases.h — the file of --databases (OUTBOX_RELAY_DATABASES): the
 * databases one relay serves, one a line.
 *
 *   # comments and blank lines are ignored
 *   NAME  connection-string
 *
 * NAME matches ^[a-z0-9_-]{1,63}$ and labels logs and metrics; the rest of
 * the line (trimmed) is a libpq connection string or URL. Passwords do not
 * belong in it: libpq's passfile (passfile=, PGPASSFILE) works as usual, and
 * the variable OUTBOX_SECRET_<NAME> (upper case, '-' as '_') gives the
 * password of NAME. Neither the string nor the password is ever printed:
 * an error names the file, the line number and the NAME.
 */
#ifndef OUTBOX_DATABASES_H
#define OUTBOX_DATABASES_H

#include <stdbool.h>
#include <stddef.h>

#define DATABASES_MAX_FILE_BYTES (1024 * 1024)
#define DATABASES_NAME_MAX 63

struct database_line {
    char *name;
    char *conninfo;
};

struct database_list {
    struct database_line *items;
    size_t count;
};

/* Reads path into out (emptied first). False with why in error (no
 * connection string in it): unreadable, too big, a bad NAME, a line
 * without a connection string, a NAME twice, no database at all. */
bool databases_read(const char *path, struct database_list *out, char *error, size_t size);
void databases_free(struct database_list *list);
/* Whether name matches ^[a-z0-9_-]{1,63}$. */
bool databases_name_valid(const char *name);
/* The line named name, or NULL. */
const struct database_line *databases_find(const struct database_list *list, const char *name);
/* The password of OUTBOX_SECRET_<NAME>, or NULL when the variable is unset. */
const char *databases_secret(const char *name);

#endif
