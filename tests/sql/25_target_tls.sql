-- 25_target_tls: a target's TLS files (migrations/0029_target_tls.sql; issue 26, item 1).
--   ca_file, client_cert_file, client_key_file   paths on the relay's host: absolute, no
--                        control character, at most 4095 bytes; NULL by default
--   cert and key         both or neither
--   who                  an admin sets them; the relay reads them; the app reads no column
BEGIN;
SELECT plan(20);

SELECT has_column('outbox', 'targets', 'ca_file', 'targets.ca_file');
SELECT has_column('outbox', 'targets', 'client_cert_file', 'targets.client_cert_file');
SELECT has_column('outbox', 'targets', 'client_key_file', 'targets.client_key_file');

INSERT INTO outbox.targets (name, url) VALUES ('plain', 'https://plain.test/hook');
SELECT is((SELECT row(ca_file, client_cert_file, client_key_file)::text FROM outbox.targets
           WHERE name = 'plain'), '(,,)', 'a target has no TLS files by default (system store, no client certificate)');

SELECT lives_ok($$INSERT INTO outbox.targets (name, url, ca_file, client_cert_file, client_key_file)
                  VALUES ('mtls', 'https://mtls.test/hook', '/etc/outbox/ca.pem',
                          '/etc/outbox/client cert.pem', '/etc/outbox/client.key')$$,
                'absolute paths (a space included) are accepted');
SELECT lives_ok($$INSERT INTO outbox.targets (name, url, ca_file) VALUES ('ca-only', 'https://ca.test/hook', '/ca.pem')$$,
                'a CA bundle alone is accepted');

-- paths: absolute, no control characters, bounded
SELECT throws_ok($$UPDATE outbox.targets SET ca_file = 'ca.pem' WHERE name = 'plain'$$,
                 '23514', 'new row for relation "targets" violates check constraint "targets_ca_file_path"',
                 'a relative ca_file is refused');
SELECT throws_ok($$UPDATE outbox.targets SET ca_file = '' WHERE name = 'plain'$$,
                 '23514', 'new row for relation "targets" violates check constraint "targets_ca_file_path"',
                 'an empty ca_file is refused (NULL means none)');
SELECT throws_ok($$UPDATE outbox.targets SET ca_file = E'/etc/ca.pem\nx' WHERE name = 'plain'$$,
                 '23514', 'new row for relation "targets" violates check constraint "targets_ca_file_path"',
                 'a ca_file with a newline is refused');
SELECT throws_ok($$UPDATE outbox.targets SET ca_file = '/' || repeat('a', 4095) WHERE name = 'plain'$$,
                 '23514', 'new row for relation "targets" violates check constraint "targets_ca_file_path"',
                 'a ca_file longer than 4095 bytes is refused');
SELECT lives_ok($$UPDATE outbox.targets SET ca_file = '/' || repeat('a', 4094) WHERE name = 'plain'$$,
                'a ca_file of 4095 bytes is accepted');
SELECT throws_ok($$UPDATE outbox.targets SET ca_file = E'\\x00' WHERE name = 'plain'$$,
                 '23514', 'new row for relation "targets" violates check constraint "targets_ca_file_path"',
                 'the text \x00 is no absolute path');
SELECT throws_ok($$SELECT convert_from('\x2f00'::bytea, 'UTF8')$$, '22021', NULL,
                 'a NUL byte cannot be stored in text at all');
SELECT throws_ok($$UPDATE outbox.targets SET client_cert_file = 'c.pem', client_key_file = '/k.pem'
                   WHERE name = 'plain'$$,
                 '23514', 'new row for relation "targets" violates check constraint "targets_client_cert_file_path"',
                 'a relative client_cert_file is refused');
SELECT throws_ok($$UPDATE outbox.targets SET client_cert_file = '/c.pem', client_key_file = E'/k\t.pem'
                   WHERE name = 'plain'$$,
                 '23514', 'new row for relation "targets" violates check constraint "targets_client_key_file_path"',
                 'a client_key_file with a tab is refused');

-- a certificate and its key come together
SELECT throws_ok($$UPDATE outbox.targets SET client_cert_file = '/c.pem' WHERE name = 'plain'$$,
                 '23514', 'new row for relation "targets" violates check constraint "targets_client_cert_and_key"',
                 'a client certificate without its key is refused');
SELECT throws_ok($$UPDATE outbox.targets SET client_key_file = '/k.pem' WHERE name = 'plain'$$,
                 '23514', 'new row for relation "targets" violates check constraint "targets_client_cert_and_key"',
                 'a key without its client certificate is refused');
SELECT lives_ok($$UPDATE outbox.targets SET client_cert_file = NULL, client_key_file = NULL WHERE name = 'mtls'$$,
                'both removed together');

-- who: the relay reads the paths, the app reads no column of targets
SELECT ok(has_column_privilege('outbox_relay', 'outbox.targets', 'client_key_file', 'SELECT'),
          'the relay reads client_key_file (a path)');
SELECT ok(NOT has_column_privilege('outbox_app', 'outbox.targets', 'client_key_file', 'SELECT'),
          'the app cannot read client_key_file');

SELECT * FROM finish();
ROLLBACK;
