/*
 * fuzz_config — options from the command line and the environment
 * (config_load in relay/config.c).
 *
 * Input: lines. "$NAME=value" puts NAME into the environment for this run
 * when NAME is DATABASE_URL or OUTBOX_RELAY_* (nothing else is touched);
 * every other line is one argv entry (at most 64). Properties: never a
 * crash, leak or UB; CONFIG_OK leaves every string set, a known log level,
 * no negative number (no option allows one), and a non-empty relay id.
 */
#include "fuzz.h"

#include "config.h"
#include "lib/log.h"

#include <stdbool.h>

#define MAX_ARGS 64
#define MAX_ENV 32

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    /* Refusals are printed with fprintf(stderr): quiet, and much faster. */
    fuzz_quiet_stdio_stderr();
    unsetenv("DATABASE_URL");
    return 0;
}

static bool env_name_allowed(const char *line, size_t name_len)
{
    if (name_len == 12 && memcmp(line, "DATABASE_URL", 12) == 0)
        return true;
    return name_len > 13 && name_len < 64 && memcmp(line, "OUTBOX_RELAY_", 13) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_strndup(data, size);
    char *argv[MAX_ARGS + 1];
    int argc = 0;
    char *env[MAX_ENV]; /* "NAME=value" strings handed to putenv */
    char *env_names[MAX_ENV];
    int envc = 0;

    for (char *line = text; line && *line != '\0';) {
        char *lf = strchr(line, '\n');
        if (lf)
            *lf = '\0';
        if (line[0] == '$') {
            char *eq = strchr(line + 1, '=');
            size_t name_len = eq ? (size_t)(eq - line - 1) : 0;
            if (eq && envc < MAX_ENV && env_name_allowed(line + 1, name_len)) {
                env[envc] = strdup(line + 1);
                env_names[envc] = strndup(line + 1, name_len);
                putenv(env[envc]);
                envc++;
            }
        } else if (argc < MAX_ARGS) {
            argv[argc++] = line;
        }
        line = lf ? lf + 1 : NULL;
    }
    argv[argc] = NULL;

    struct config cfg;
    enum config_result res = config_load(&cfg, argc, argv);
    FUZZ_CHECK(res == CONFIG_OK || res == CONFIG_HELP || res == CONFIG_ERROR);
    if (res == CONFIG_OK) {
        FUZZ_CHECK(cfg.db && cfg.relay_id && cfg.migrations_dir && cfg.admin_listen &&
                   cfg.log_level);
        log_level_t level;
        FUZZ_CHECK(log_level_parse(cfg.log_level, &level));
        FUZZ_CHECK(cfg.relay_id[0] != '\0');
        FUZZ_CHECK(cfg.batch_size >= 1 && cfg.max_in_flight >= 1 &&
                   cfg.max_in_flight_per_target >= 1 && cfg.poll_interval_ms >= 0 &&
                   cfg.lease_ms >= 0 && cfg.grace_ms >= 0 && cfg.reconnect_max_ms >= 0 &&
                   cfg.connect_timeout_ms >= 0 && cfg.max_response_bytes >= 0 &&
                   cfg.targets_refresh_ms >= 0);
    }
    config_free(&cfg);
    log_set_level(LOG_ERROR); /* config_load sets it from the input */

    for (int i = envc; i-- > 0;) {
        unsetenv(env_names[i]); /* takes env[i] out of environ: now it may go */
        free(env_names[i]);
        free(env[i]);
    }
    free(text);
    return 0;
}
