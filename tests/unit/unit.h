/*
 * unit.h — the suites of build/asan/unit-tests, one per relay/ module.
 *
 * Each tests/unit/test_<module>.c defines one suite function; test_main.c
 * runs them all in one SRunner (CK_FORK: every test in its own child, so a
 * crash or a hang fails one test, not the run).
 */
#ifndef OUTBOX_UNIT_H
#define OUTBOX_UNIT_H

#include <check.h>

Suite *outcome_suite(void);
Suite *mcp_upstream_suite(void);
Suite *strbuf_suite(void);
Suite *config_suite(void);
Suite *databases_suite(void);
Suite *targets_suite(void);
Suite *deliver_suite(void);
Suite *record_batch_suite(void);
Suite *id_batch_suite(void);
Suite *sql_suite(void);
Suite *stmt_slot_suite(void);
Suite *log_suite(void);

Suite *metrics_suite(void);
Suite *flow_suite(void);
Suite *httpd_suite(void);
Suite *admin_suite(void);
Suite *ui_suite(void);
Suite *json_schema_suite(void);
Suite *mcp_protocol_suite(void);
Suite *mcp_admission_suite(void);
Suite *json_text_suite(void);
Suite *mcp_arguments_suite(void);
Suite *json_schema_canonical_suite(void);
Suite *oauth_jwt_suite(void);

#endif
