CREATE FUNCTION outbox.mcp_schema_pattern_problem(p text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
DECLARE
    n          int := length(p);
    i          int := 1;
    c          text;
    lvl       int := 0;
    weights    bigint[] := array_fill(0::bigint, ARRAY[33]);
    last_w       bigint := 0;
    can_repeat boolean := false;
    w          bigint;
    atom       boolean;
    r          record;
    k          record;
    -- a class being read
    bits       bit(128);
    mb         int;
    literals   int;
    negated    boolean;
    lo         int;
    hi         int;
    lo_class   boolean;
    hi_class   boolean;
    lo_bits    bit(128);
    lo_mb      int;
    is_class   boolean;
    ch         int;
    copies     bigint;
    qlo        bigint;
    qhi        bigint;
    comma      boolean;
    start      int;
    zero CONSTANT bit(128) := repeat('0', 128)::bit(128);
BEGIN
    IF octet_length(p) > 1024 THEN
        RETURN 'is longer than 1024 bytes';
    END IF;
    WHILE i <= n LOOP
        c := substr(p, i, 1);
        w := NULL;
        is_class := false;
        IF c = '\' THEN
            i := i + 1;
            IF i > n THEN
                RETURN 'ends with a backslash';
            END IF;
            SELECT * INTO k FROM outbox.mcp_schema_re_class(substr(p, i, 1));
            IF k.bits IS NOT NULL THEN
                bits := k.bits; mb := k.mb; literals := 0; is_class := true;
                i := i + 1;
            ELSIF substr(p, i, 1) IN ('b', 'B') THEN
                i := i + 1;
                can_repeat := false;
                w := 1; atom := false;
            ELSE
                SELECT * INTO r FROM outbox.mcp_schema_re_char(p, i);
                IF r.why IS NOT NULL THEN
                    RETURN r.why;
                END IF;
                i := r.next;
                ch := r.cp;
                IF ch = 0 THEN
                    RETURN 'matches U+0000, which POSIX regcomp cannot';
                END IF;
                can_repeat := true;
                w := CASE WHEN ch < 128 THEN 1 WHEN ch < 2048 THEN 3 WHEN ch < 65536 THEN 4 ELSE 5 END; atom := true;
            END IF;
        ELSIF c = '.' THEN
            bits := ~zero; bits := set_bit(set_bit(bits, 10, 0), 13, 0); mb := 4; literals := 0; is_class := true;
            i := i + 1;
        ELSIF c = '[' THEN
            i := i + 1;
            bits := zero; mb := 0; literals := 0;
            negated := substr(p, i, 1) = '^';
            IF negated THEN i := i + 1; END IF;
            LOOP
                IF i > n THEN
                    RETURN 'has an unterminated [';
                END IF;
                IF substr(p, i, 1) = ']' THEN
                    i := i + 1;
                    EXIT;
                END IF;
                -- the low end (or the one atom)
                FOR pass IN 1 .. 2 LOOP
                    IF pass = 2 THEN
                        IF NOT (i + 1 <= n AND substr(p, i, 1) = '-' AND substr(p, i + 1, 1) <> ']') THEN
                            EXIT;
                        END IF;
                        i := i + 1;
                    END IF;
                    hi_class := false;
                    IF substr(p, i, 1) <> '\' THEN
                        hi := ascii(substr(p, i, 1));
                        i := i + 1;
                    ELSE
                        i := i + 1;
                        IF i > n THEN
                            RETURN 'ends with a backslash';
                        END IF;
                        SELECT * INTO k FROM outbox.mcp_schema_re_class(substr(p, i, 1));
                        IF k.bits IS NOT NULL THEN
                            hi_class := true; i := i + 1;
                            IF pass = 1 THEN lo_bits := k.bits; lo_mb := k.mb; END IF;
                        ELSIF substr(p, i, 1) = 'b' THEN
                            hi := 8; i := i + 1;
                        ELSE
                            SELECT * INTO r FROM outbox.mcp_schema_re_char(p, i);
                            IF r.why IS NOT NULL THEN
                                RETURN r.why;
                            END IF;
                            hi := r.cp; i := r.next;
                        END IF;
                    END IF;
                    IF pass = 1 THEN
                        lo := hi; lo_class := hi_class; hi := NULL; hi_class := false;
                    END IF;
                END LOOP;
                IF hi IS NOT NULL OR hi_class THEN
                    -- a range (hi_class: its high end was a class escape)
                    IF lo_class OR hi_class THEN
                        RETURN 'has a range with a class escape as an end';
                    END IF;
                    IF lo > hi THEN
                        RETURN 'has a range out of order';
                    END IF;
                    IF hi >= 128 THEN
                        RETURN 'has a range with a non-ASCII end: not supported';
                    END IF;
                    IF lo = 0 THEN
                        RETURN 'matches U+0000, which POSIX regcomp cannot';
                    END IF;
                    FOR ch IN lo .. hi LOOP
                        bits := set_bit(bits, ch, 1);
                    END LOOP;
                ELSIF lo_class THEN
                    bits := bits | lo_bits;
                    mb := CASE WHEN mb = lo_mb OR lo_mb = 0 THEN mb WHEN mb = 0 THEN lo_mb ELSE 1 END;
                ELSIF lo = 0 THEN
                    RETURN 'matches U+0000, which POSIX regcomp cannot';
                ELSIF lo < 128 THEN
                    bits := set_bit(bits, lo, 1);
                ELSE
                    IF literals = 32 THEN
                        RETURN 'has a class with more than 32 non-ASCII characters';
                    END IF;
                    literals := literals + 1;
                END IF;
            END LOOP;
            IF negated THEN
                IF literals > 0 THEN
                    RETURN 'has a negated class with non-ASCII characters: not supported';
                END IF;
                bits := ~bits;
                mb := CASE mb WHEN 0 THEN 1 WHEN 1 THEN 0 WHEN 2 THEN 3 WHEN 3 THEN 2 ELSE 0 END;
            END IF;
            is_class := true;
        ELSIF c = '(' THEN
            i := i + 1;
            IF substr(p, i, 1) = '?' THEN
                i := i + 1;
                IF substr(p, i, 1) = ':' THEN
                    i := i + 1;
                ELSIF substr(p, i, 1) IN ('=', '!') THEN
                    RETURN format('has a lookahead (?%s: not supported by POSIX ERE', substr(p, i, 1));
                ELSIF substr(p, i, 1) = '<' AND substr(p, i + 1, 1) IN ('=', '!') THEN
                    RETURN format('has a lookbehind (?<%s: not supported by POSIX ERE', substr(p, i + 1, 1));
                ELSIF substr(p, i, 1) = '<' THEN
                    i := i + 1;
                    start := i;
                    WHILE i <= n AND (substr(p, i, 1) ~ '^[_$A-Za-z]$' OR (i > start AND substr(p, i, 1) ~ '^[0-9]$')) LOOP
                        i := i + 1;
                    END LOOP;
                    IF i = start OR i > n OR substr(p, i, 1) <> '>' THEN
                        RETURN 'has a malformed group name';
                    END IF;
                    i := i + 1;
                ELSE
                    RETURN 'has a (? group that is not (?: or (?<name>';
                END IF;
            END IF;
            IF lvl = 32 THEN
                RETURN 'has groups nested deeper than 32';
            END IF;
            lvl := lvl + 1;
            weights[lvl + 1] := 0;
            can_repeat := false;
        ELSIF c = ')' THEN
            i := i + 1;
            IF lvl = 0 THEN
                RETURN 'has an unmatched )';
            END IF;
            lvl := lvl - 1;
            can_repeat := true;
            w := weights[lvl + 2] + 1; atom := true;
        ELSIF c IN ('|', '^', '$') THEN
            i := i + 1;
            can_repeat := false;
            w := 1; atom := false;
        ELSIF c IN ('*', '+', '?', '{') THEN
            IF NOT can_repeat THEN
                RETURN 'has a quantifier with nothing to repeat';
            END IF;
            i := i + 1;
            copies := CASE WHEN c = '+' THEN 2 ELSE 1 END;
            IF c = '{' THEN
                qlo := NULL; qhi := -1;
                FOR pass IN 1 .. 2 LOOP
                    IF pass = 2 THEN
                        comma := substr(p, i, 1) = ',';
                        IF NOT comma THEN EXIT; END IF;
                        i := i + 1;
                        IF i > n OR substr(p, i, 1) = '}' THEN EXIT; END IF;
                    END IF;
                    start := i;
                    w := 0;
                    WHILE i <= n AND substr(p, i, 1) ~ '^[0-9]$' LOOP
                        w := w * 10 + ascii(substr(p, i, 1)) - 48;
                        i := i + 1;
                        IF w > 1000 THEN
                            RETURN 'has a repetition bound above 1000';
                        END IF;
                    END LOOP;
                    IF i = start THEN
                        RETURN 'has a { that is not a quantifier (write \{)';
                    END IF;
                    IF pass = 1 THEN qlo := w; ELSE qhi := w; END IF;
                END LOOP;
                IF i > n OR substr(p, i, 1) <> '}' THEN
                    RETURN 'has a { that is not a quantifier (write \{)';
                END IF;
                i := i + 1;
                IF comma AND qhi >= 0 AND qhi < qlo THEN
                    RETURN format('has a quantifier {%s,%s} out of order', qlo, qhi);
                END IF;
                copies := qlo + CASE WHEN NOT comma THEN 0 WHEN qhi < 0 THEN 1 ELSE 2 * (qhi - qlo) END;
                IF copies = 0 THEN copies := 1; END IF;
            END IF;
            IF substr(p, i, 1) = '?' THEN
                i := i + 1;
            END IF;
            can_repeat := false;
            w := last_w * (copies - 1); atom := false;
        ELSIF c IN ('}', ']') THEN
            RETURN format('has a lone %s (write \%s)', c, c);
        ELSE
            ch := ascii(c);
            i := i + 1;
            can_repeat := true;
            w := CASE WHEN ch < 128 THEN 1 WHEN ch < 2048 THEN 3 WHEN ch < 65536 THEN 4 ELSE 5 END; atom := true;
        END IF;
        IF is_class THEN
            lo := (CASE WHEN bits <> zero THEN 1 ELSE 0 END) + (CASE WHEN mb <> 0 THEN 1 ELSE 0 END) + literals;
            IF lo = 0 THEN
                RETURN 'has a class that matches nothing';
            END IF;
            can_repeat := true;
            w := lo + (CASE mb WHEN 1 THEN 9 WHEN 2 THEN 17 WHEN 3 THEN 45 WHEN 4 THEN 16 ELSE 0 END) + 4 * literals;
            atom := true;
        END IF;
        IF w IS NOT NULL THEN
            IF atom THEN
                last_w := w;
            END IF;
            weights[lvl + 1] := weights[lvl + 1] + w;
            IF weights[lvl + 1] > 10000 THEN
                RETURN 'is too large once its repetitions are written out for POSIX regcomp (bound lengths with '
                       'minLength and maxLength instead)';
            END IF;
        END IF;
    END LOOP;
    IF lvl > 0 THEN
        RETURN 'has an unmatched (';
    END IF;
    RETURN NULL;
END
$_$;

COMMENT ON FUNCTION outbox.mcp_schema_pattern_problem(p text) IS 'NULL when a "pattern" (or a key of "patternProperties") is one the front door translates to POSIX ERE, else why not, as relay/mcp/json_schema_regex.c words it.';

REVOKE ALL ON FUNCTION outbox.mcp_schema_pattern_problem(p text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_schema_pattern_problem(p text) TO outbox_admin;
