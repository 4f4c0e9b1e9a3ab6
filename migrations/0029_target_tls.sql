-- 0029: per-target TLS trust and client certificate (issue 26, item 1).
--
-- Before: a target was trusted only through the relay host's system CA
-- store, and the relay could not present a client certificate: an internal
-- API behind a private CA, or one that requires mutual TLS, could not be a
-- target.
--
-- Now a target may name, as files on the relay's host:
--   ca_file           a PEM bundle of the CAs that verify the target's
--                     certificate, instead of the system store (libcurl's
--                     CURLOPT_CAINFO); verification itself stays on, always
--   client_cert_file  a PEM client certificate (chain) the relay presents
--   client_key_file   its PEM private key, unencrypted
-- The relay reads the files when it connects; the database holds only their
-- paths, never a certificate's or a key's bytes (operators can read this
-- table; the key stays readable by the relay's user only). The checks below
-- keep a path usable and unsurprising: absolute (the relay's working
-- directory is no part of a target), no control characters (a NUL cannot be
-- stored in text at all; a newline would split a log line), at most 4095
-- bytes (PATH_MAX); a client certificate and its key come together or not
-- at all. Whether a file exists is known only on the relay's host: a file
-- that cannot be read fails the attempt before anything is sent (not_sent),
-- with an error naming this column.
--
-- Compatibility: three nullable columns; a relay of the previous release
-- selects named columns and does not see them (it keeps the system store
-- and no client certificate, so a target that needs them fails there as it
-- did before: roll out the relay first, then set the columns).
--
-- Locks: ADD COLUMN without a default and ADD CONSTRAINT on a table of a
-- handful of rows: targets' ACCESS EXCLUSIVE lock for a moment.

ALTER TABLE outbox.targets
    ADD COLUMN ca_file text
        CONSTRAINT targets_ca_file_path
        CHECK (ca_file ~ '^/[^[:cntrl:]]*$' AND octet_length(ca_file) <= 4095),
    ADD COLUMN client_cert_file text
        CONSTRAINT targets_client_cert_file_path
        CHECK (client_cert_file ~ '^/[^[:cntrl:]]*$' AND octet_length(client_cert_file) <= 4095),
    ADD COLUMN client_key_file text
        CONSTRAINT targets_client_key_file_path
        CHECK (client_key_file ~ '^/[^[:cntrl:]]*$' AND octet_length(client_key_file) <= 4095),
    ADD CONSTRAINT targets_client_cert_and_key
        CHECK ((client_cert_file IS NULL) = (client_key_file IS NULL));

COMMENT ON COLUMN outbox.targets.ca_file IS
    'Absolute path, on the relay''s host, of a PEM bundle of the CAs that verify the target''s certificate instead of the system store; NULL = the system store. Verification is always on.';
COMMENT ON COLUMN outbox.targets.client_cert_file IS
    'Absolute path, on the relay''s host, of the PEM client certificate the relay presents (mutual TLS); set with client_key_file. NULL = none. Never the certificate itself.';
COMMENT ON COLUMN outbox.targets.client_key_file IS
    'Absolute path, on the relay''s host, of the unencrypted PEM private key of client_cert_file, readable by the relay''s user only. NULL = none. Never the key itself.';
