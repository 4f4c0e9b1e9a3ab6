-- tests/inbox/example_schema.sql — the example receiver's own tables (tests/inbox/inbox_receiver.c),
-- next to schema/inbox.sql in the receiving service's database.
--   accounts  what the effect changes: balance - amount
--   effects   one row per effect performed, so tests can count effects per key (key is NOT unique
--             here on purpose: a second effect for a key would show up as a second row)
CREATE TABLE accounts (
    id      integer PRIMARY KEY,
    balance numeric NOT NULL
);
CREATE TABLE effects (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key     text NOT NULL,
    account integer NOT NULL REFERENCES accounts (id),
    amount  numeric NOT NULL,
    at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX effects_key ON effects (key);
