#!/usr/bin/env bash
# The README's agent step, as written there (issue 22): the first SQL block of
# "An agent's business transaction" is taken from README.md, the target
# pointed at a real receiver, and the step run three times with one key by a
# login that has only outbox_app (a crash and resume, twice). One refund at
# the receiver, one debit in accounts, and the three calls say inserted
# t, f, f. The block used to debit on every run.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start r --dedupe
python3 - "$ITEST_ROOT/README.md" "$T" <<'PY' || bail "README.md has no agent step block"
import re, sys
text = open(sys.argv[1]).read()
section = text[text.index("## An agent's business transaction"):]
block = re.search(r"```sql\n(.*?)```", section, re.S).group(1)
setup, step = block.split("-- in the agent's step", 1)
step = step[step.index("BEGIN;"):step.index("COMMIT;") + len("COMMIT;")]
open(sys.argv[2] + "/setup.sql", "w").write(setup)
open(sys.argv[2] + "/step.sql", "w").write(step + "\n")
PY
sed -i "s|https://payments.internal|http://127.0.0.1:$RECV_PORT_r|g" "$T/setup.sql"
sql "CREATE TABLE accounts (id int PRIMARY KEY, balance_cents bigint NOT NULL);
     INSERT INTO accounts VALUES (42, 100000);
     CREATE ROLE agent_app LOGIN; GRANT outbox_app TO agent_app;
     GRANT SELECT, UPDATE ON accounts TO agent_app" >/dev/null
psql -X -q -v ON_ERROR_STOP=1 -f "$T/setup.sql" >"$T/setup.out" 2>&1
is "$?" 0 "the README's set-up (target, step function) runs"
ok "the step block is a transaction that calls the step" grep -q "refund_step('run-7f3a:step-4'" "$T/step.sql"

for run in 1 2 3; do
    psql -X -q -tA -v ON_ERROR_STOP=1 -U agent_app -f "$T/step.sql" >>"$T/steps.out" 2>&1
done
is "$(tr '\n' ' ' <"$T/steps.out")" "pending|t pending|f pending|f " \
    "three runs of the step as outbox_app: inserted only the first time"
is "$(sql "SELECT balance_cents FROM accounts WHERE id = 42")" "97500" "one debit of 2500, not three"

relay_start a --poll-interval-ms 100
ok "the refund is delivered" wait_for 20 "SELECT status FROM outbox.outcome('run-7f3a:step-4')" succeeded
is "$(receiver_stat r effects_total)" "1" "one refund at the receiver"
is "$(sql "SELECT count(*) FROM outbox.intents")" "1" "one intent"
itest_done
