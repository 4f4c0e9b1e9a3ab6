-- 0030: HTTP/2 per target (issue 26, item 2).
--
-- Before: the relay left the HTTP version to libcurl, whose default offers
-- h2 by ALPN to https:// URLs: a target that speaks h2 got it unasked, and
-- a burst still opened a connection per request (nothing waited for the
-- connection being made); one that speaks HTTP/1.1 got up to a connection
-- per request in flight (1,024 TLS connections to one API at 1,024).
--
-- Now a target says which HTTP the relay speaks to it:
--   '1.1'  HTTP/1.1 only (the default: nothing changes)
--   '2'    offer h2 by ALPN over TLS (https://), HTTP/1.1 when the target
--          does not take it; a cleartext http:// URL stays on HTTP/1.1
-- No prior knowledge (h2 over cleartext without negotiation): with Debian
-- 12's libcurl (7.88.1) every request after the first on a kept connection
-- fails ("Error in the HTTP2 framing layer", CURLE_HTTP2, nothing sent;
-- the curl command line does the same), so such a target would get a new
-- connection per request at best. A later libcurl can bring it back as a
-- third value.
-- Requests to an h2 target share at most 4 connections (per host:port), as
-- many streams each as the target allows (its SETTINGS; nginx: 128); more
-- wait in the relay's HTTP client for a stream. No column sets that cap:
-- libcurl takes it for a whole multi handle (relay/deliver.h), and it is
-- the relay's h2 multi, apart from HTTP/1.1 targets, that it bounds; the
-- target's max_in_flight still bounds its requests.
--
-- A target that cannot deduplicate (key_header NULL) stays on HTTP/1.1: the
-- relay gives each of its requests a connection of its own, because a
-- request on a reused connection that dies before the answer is re-sent by
-- libcurl (relay/deliver.c, DESIGN), and with h2 every request but the first
-- rides a shared connection. A target that deduplicates takes such a re-send
-- as the duplicate it is.
--
-- Compatibility: a NOT NULL column with a constant default (no rewrite). A
-- relay of the previous release selects named columns and keeps libcurl's
-- default (above); this release speaks HTTP/1.1 to every target left at
-- '1.1', including one that took h2 before: set '2' where h2 wins.
--
-- Locks: targets' ACCESS EXCLUSIVE lock for a moment (a handful of rows; the
-- checks scan them).

ALTER TABLE outbox.targets
    ADD COLUMN http_version text NOT NULL DEFAULT '1.1'
        CONSTRAINT targets_http_version_check
        CHECK (http_version IN ('1.1', '2')),
    ADD CONSTRAINT targets_http2_needs_key
        CHECK (http_version = '1.1' OR key_header IS NOT NULL);

COMMENT ON COLUMN outbox.targets.http_version IS
    'HTTP the relay speaks to the target: ''1.1''; ''2'' (h2 offered by ALPN over TLS, HTTP/1.1 if the target refuses it; http:// URLs stay on 1.1). ''2'' only with a key_header. Requests to an h2 target share at most 4 connections.';
