/*
 * fuzz.h — what the libFuzzer targets of tests/fuzz/ share.
 *
 * Each fuzz_<name>.c defines LLVMFuzzerTestOneInput (and perhaps
 * LLVMFuzzerInitialize); libFuzzer provides main. A broken property is a
 * crash: FUZZ_CHECK aborts with the condition, so the input is saved as
 * crash-* like any ASan or UBSan finding.
 */
#ifndef OUTBOX_FUZZ_H
#define OUTBOX_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            dprintf(2, "%s:%d: property broken: %s\n", __FILE__, __LINE__, #cond);                 \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* A NUL-terminated copy of n bytes (free it). */
static inline char *fuzz_strndup(const uint8_t *data, size_t n)
{
    char *s = malloc(n + 1);
    if (s == NULL)
        abort();
    memcpy(s, data, n);
    s[n] = '\0';
    return s;
}

/* Strict UTF-8 (no overlongs, no surrogates, at most U+10FFFF), written
 * independently of the relay's two validators so that it can judge them. */
static inline int fuzz_utf8_valid(const unsigned char *s, size_t n, int allow_nul)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c == 0 && !allow_nul)
            return 0;
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        unsigned cp, min;
        if (c >= 0xC0 && c < 0xE0) {
            need = 1, cp = c & 0x1F, min = 0x80;
        } else if (c >= 0xE0 && c < 0xF0) {
            need = 2, cp = c & 0x0F, min = 0x800;
        } else if (c >= 0xF0 && c < 0xF8) {
            need = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return 0;
        }
        if (n - i - 1 < need)
            return 0;
        for (size_t k = 1; k <= need; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += need + 1;
    }
    return 1;
}

/* Silences stdio's stderr (option errors and the like: slow and noisy under
 * a fuzzer). The sanitizers and libFuzzer write to fd 2 and their own
 * streams, so crash reports still show. */
static inline void fuzz_quiet_stdio_stderr(void)
{
    FILE *null = fopen("/dev/null", "w");
    if (null)
        stderr = null;
}

#endif
