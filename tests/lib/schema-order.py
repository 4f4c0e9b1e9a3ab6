#!/usr/bin/env python3
"""Writes schema/outbox/ from a pg_dump --schema-only of schema outbox: one
file per live object (types/, tables/, functions/, views/, triggers/, ...)
and load.sql, which builds the schema from them.

pg_dump writes objects by kind and dependency, comments and privileges far
from what they describe; here each object's file holds its definition with
its comments, indexes, constraints and privileges. Statements are pg_dump's
own, so load.sql builds the same schema (tests/sql/schema_equivalence.sh).
The one generated view of the schema (issue 39: two, a single file beside
this folder, told the same thing twice).
Usage: schema-order.py DUMP LAST_MIGRATION --split schema/outbox
"""
import os
import shutil
import re
import sys

ROLES = """\
-- Roles are cluster-wide, so not part of a schema dump: created when missing, as
-- migrations 0005 and 0022 do (every role the privileges below grant to).
DO $$
DECLARE
    role_name text;
BEGIN
    FOREACH role_name IN ARRAY ARRAY[{roles}] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = role_name) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', role_name);
        END IF;
    END LOOP;
END
$$;
GRANT outbox_operator TO outbox_admin;
"""

GRANTEE_RE = re.compile(r"^GRANT .* TO (\w+);$", re.M)


def grantees(dump):
    """Every role the dump grants to, in order of first grant: the roles the
    schema needs to exist before its privileges can load (PUBLIC exists)."""
    out = []
    for role in GRANTEE_RE.findall(dump):
        if role != "PUBLIC" and role not in out:
            out.append(role)
    return ", ".join("'%s'" % r for r in out)


NAME_RE = re.compile(r"^-- Name: (.*); Type: (.*); Schema: (.*); Owner: .*$")


def blocks(text):
    """(name, type, body) for each object pg_dump wrote, in its order."""
    out = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = NAME_RE.match(lines[i])
        if not m:
            i += 1
            continue
        j = i + 2  # past the closing "--"
        body = []
        while j < len(lines) and not (lines[j] == "--" and j + 1 < len(lines) and NAME_RE.match(lines[j + 1])):
            if lines[j].startswith("-- PostgreSQL database dump complete") or lines[j].startswith("\\unrestrict"):
                break
            body.append(lines[j])
            j += 1
        out.append((m.group(1), m.group(2), "\n".join(body).strip("\n")))
        i = j
    return out


LOADER_HEADER = """\
-- schema/outbox/load.sql — the net schema of outbox-relay, one file per live
-- object: what a database looks like after every migration up to and
-- including {last}. `psql -f schema/outbox/load.sql` builds it (the files in
-- an order that works); tests/sql/schema_equivalence.sh proves it builds the
-- same schema as migrations/, tests/sql/schema_fresh_cluster.sh that it loads
-- into a fresh cluster. Read it to learn the data model; build databases with
-- migrations/ (`outbox-relay migrate`), which also records what is applied.
--
-- Why one file per object: `git log -p schema/outbox/functions/record.sql`
-- is the history of outbox.record, each change a small diff, and a new
-- migration is reviewed through the diff it makes here. Written by
-- `make schema` (tests/lib/schema-file.sh); do not edit by hand.
"""

FILE_NAME_RE = re.compile(r"[^A-Za-z0-9_]+")


def file_name(name):
    """A function's name without its arguments, as a file name."""
    return FILE_NAME_RE.sub("_", name.split("(")[0]).strip("_")


def split(objs, outdir, last, roles_sql):
    """Writes one file per live object under outdir, and outdir/load.sql.

    Types, tables (with identity, constraints, indexes and comments), foreign
    keys, functions (every overload of a name in one file, with comments and
    privileges), views, triggers; each object's privileges go in its file.
    """

    tables = {n for n, t, _ in objs if t == "TABLE"}
    views = {n for n, t, _ in objs if t == "VIEW"}
    files, order = {}, []

    def add(path, body):
        if path not in files:
            files[path] = []
            order.append(path)
        files[path].append(body)

    def owner_of(name, kind):
        """(folder, file) of the object a block belongs to."""
        if kind == "SCHEMA":
            return ("", "schema")
        if kind == "TYPE":
            return ("types", name)
        if kind in ("TABLE", "SEQUENCE", "INDEX"):
            return None
        if kind == "FUNCTION":
            return ("functions", file_name(name))
        if kind == "VIEW":
            return ("views", name)
        if kind == "TRIGGER":
            return ("triggers", name.split(" ")[1])
        if kind == "FK CONSTRAINT":
            return ("", "foreign_keys")
        if kind in ("CONSTRAINT", "CHECK CONSTRAINT"):
            return ("tables", name.split(" ")[0])
        if kind in ("COMMENT", "ACL"):
            what, _, rest = name.partition(" ")
            if what == "COLUMN" or what == "TABLE":
                target = rest.split(".")[0] if what == "COLUMN" else rest
                return ("views" if target in views else "tables", target)
            if what == "FUNCTION":
                return ("functions", file_name(rest))
            if what == "TYPE":
                return ("types", rest)
            if what == "VIEW":
                return ("views", rest)
            if what == "SCHEMA":
                return ("", "schema")
            if what == "INDEX":
                return ("index_of", rest)
            if what == "TRIGGER":
                return ("triggers", rest.split(" ON ")[0])
            if what == "SEQUENCE":
                return ("sequence_of", rest)
        return ("", "other")

    index_table, sequence_table = {}, {}
    for name, kind, body in objs:
        if kind == "INDEX":
            m = re.search(r" ON (?:ONLY )?outbox\.(\w+)", body)
            index_table[name] = m.group(1)
        if kind == "CONSTRAINT":  # a primary key's or unique constraint's index
            index_table.setdefault(name.split(" ")[1], name.split(" ")[0])
        if kind == "SEQUENCE":
            m = re.search(r"ALTER TABLE outbox\.(\w+)", body)
            if m:
                sequence_table[name] = m.group(1)
    for name, kind, body in objs:
        if kind == "TABLE":
            where = ("tables", name)
        elif kind == "INDEX":
            where = ("tables", index_table[name])
        elif kind == "SEQUENCE":
            where = ("tables", sequence_table.get(name, name))
        else:
            where = owner_of(name, kind)
            if where[0] == "index_of":
                where = ("tables", index_table.get(where[1], where[1]))
            elif where[0] == "sequence_of":
                where = ("tables", sequence_table.get(where[1], where[1]))
        add(os.path.join(where[0], where[1] + ".sql"), body)

    if os.path.isdir(outdir):
        shutil.rmtree(outdir)
    for path in order:
        full = os.path.join(outdir, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write("\n\n".join(files[path]) + "\n")
    # What works, in this order: pg_dump's own order inside each kind.
    kinds = ["schema.sql", "types/", "tables/", "foreign_keys.sql", "functions/", "views/", "triggers/", "other.sql"]
    with open(os.path.join(outdir, "load.sql"), "w") as f:
        f.write(LOADER_HEADER.format(last=last))
        f.write("\nSET check_function_bodies = false;\nSET client_min_messages = warning;\n")
        roles = ROLES.format(roles=roles_sql)
        f.write("\n" + roles + "\n")
        for kind in kinds:
            for path in order:
                if path == kind or (kind.endswith("/") and path.startswith(kind)):
                    f.write("\\ir %s\n" % path)


if __name__ == "__main__":
    if len(sys.argv) > 4 and sys.argv[3] == "--split":
        dump = open(sys.argv[1]).read()
        split(blocks(dump), sys.argv[4], sys.argv[2], grantees(dump))
    else:
        sys.exit("usage: schema-order.py DUMP LAST_MIGRATION --split schema/outbox")
