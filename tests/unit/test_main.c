/*
 * test_main.c — the one main() of build/asan/unit-tests.
 *
 * Runs every suite declared in unit.h and prints Check's summary line
 * ("100%: Checks: N, Failures: 0, Errors: 0"). Exit status 0 only when
 * every test passed. CK_RUN_SUITE / CK_RUN_CASE / CK_FORK from the
 * environment work as Check documents them.
 */
#include "unit.h"

#include <stdlib.h>

int main(void)
{
    SRunner *runner = srunner_create(outcome_suite());
    srunner_add_suite(runner, mcp_upstream_suite());
    srunner_add_suite(runner, strbuf_suite());
    srunner_add_suite(runner, config_suite());
    srunner_add_suite(runner, databases_suite());
    srunner_add_suite(runner, targets_suite());
    srunner_add_suite(runner, deliver_suite());
    srunner_add_suite(runner, record_batch_suite());
    srunner_add_suite(runner, id_batch_suite());
    srunner_add_suite(runner, sql_suite());
    srunner_add_suite(runner, stmt_slot_suite());
    srunner_add_suite(runner, log_suite());
    srunner_add_suite(runner, metrics_suite());
    srunner_add_suite(runner, flow_suite());
    srunner_add_suite(runner, httpd_suite());
    srunner_add_suite(runner, admin_suite());
    srunner_add_suite(runner, ui_suite());
    srunner_add_suite(runner, json_schema_suite());
    srunner_add_suite(runner, mcp_protocol_suite());
    srunner_add_suite(runner, mcp_admission_suite());
    srunner_add_suite(runner, json_text_suite());
    srunner_add_suite(runner, mcp_arguments_suite());
    srunner_add_suite(runner, json_schema_canonical_suite());
    srunner_add_suite(runner, oauth_jwt_suite());
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
