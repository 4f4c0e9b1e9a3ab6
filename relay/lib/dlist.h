/*
 * dlist.h — the intrusive doubly-linked list of relay/.
 *
 * A list is a head pointer; its elements carry their own prev and next
 * pointers (deliveries in flight, the admin port's re-checks, httpd's
 * connections), so linking and unlinking allocate nothing and take O(1).
 * Macros, because the element types differ; arguments are evaluated more
 * than once, so pass plain lvalues.
 */
#ifndef OUTBOX_DLIST_H
#define OUTBOX_DLIST_H

#include <stddef.h>

/* Puts node at the front of the list that head points to. */
#define DLIST_PUSH_FRONT(head, node)                                                               \
    do {                                                                                           \
        (node)->prev = NULL;                                                                       \
        (node)->next = (head);                                                                     \
        if ((head) != NULL)                                                                        \
            (head)->prev = (node);                                                                 \
        (head) = (node);                                                                           \
    } while (0)

/* Takes node out of the list that head points to; its links become NULL. */
#define DLIST_REMOVE(head, node)                                                                   \
    do {                                                                                           \
        if ((node)->prev != NULL)                                                                  \
            (node)->prev->next = (node)->next;                                                     \
        else                                                                                       \
            (head) = (node)->next;                                                                 \
        if ((node)->next != NULL)                                                                  \
            (node)->next->prev = (node)->prev;                                                     \
        (node)->prev = (node)->next = NULL;                                                        \
    } while (0)

#endif
