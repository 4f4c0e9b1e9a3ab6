#!/usr/bin/env python3
"""tests/bench/designs/analyze.py RESULTS_DIR: the designs bench's tables (Markdown on stdout).

Reads what sql/measure.sql appended to RESULTS_DIR (summary.csv, walrecs.csv, byrel.csv; see
its header for the columns) over every run of every design (D0, D0s, D0e, D1, D1f, D2, D2f,
D2b, D2bf; tests/bench/designs/README.md) and prints, per delivered intent: a summary (B-tree
entries, heap records, WAL bytes, backend CPU for the drain, the load and both together), the
WAL records by type for the claim, the record, the whole drain and the load (medians over the
runs), the backend CPU of every run, WAL without full-page images, records per relation, and
the drain CPU paired by round against d0 and d0s. Standard library only.
"""
import collections
import csv
import os
import statistics as st
import sys

RES = sys.argv[1] if len(sys.argv) > 1 else '.'
ORDER = ['d0', 'd0s', 'd0e', 'd1', 'd1f', 'd2', 'd2f', 'd2b', 'd2bf']
S = collections.defaultdict(dict)   # design -> run -> row
for r in csv.reader(open(f'{RES}/summary.csv')):
    d, run = r[0], int(r[1])
    v = dict(zip(['n', 'load_wal', 'load_ns', 'load_tk', 'load_s', 'drain_wal', 'drain_ns', 'drain_tk', 'drain_s',
                  'claim_ns', 'record_ns', 'left', 'batches'], map(float, r[2:])))
    S[d][run] = v
W = collections.defaultdict(lambda: collections.defaultdict(lambda: collections.Counter()))  # d -> run -> (phase,key) -> val
for r in csv.reader(open(f'{RES}/walrecs.csv')):
    d, run, phase, rm, rt, cnt, ln, fpi = r[0], int(r[1]), r[2], r[3], r[4], int(r[5]), int(r[6]), int(r[7] or 0)
    if run not in S[d]:
        continue
    c = W[d][run]
    base = rt.replace('+INIT', '')
    c[(phase, f'{rm}/{base}')] += cnt
    c[(phase, 'bytes')] += ln
    c[(phase, 'fpi_bytes')] += fpi
    c[(phase, 'records')] += cnt
designs = [d for d in ORDER if d in S]
med = lambda xs: st.median(xs) if xs else float('nan')

def walmetric(d, phase, keys):
    vals = []
    for run, v in S[d].items():
        c = W[d][run]
        vals.append(sum(c[(phase, k)] for k in keys) / v['n'])
    return med(vals)

BT_ENTRY = ['Btree/INSERT_LEAF', 'Btree/INSERT_POST']
BT_STRUCT = ['Btree/INSERT_UPPER', 'Btree/SPLIT_L', 'Btree/SPLIT_R', 'Btree/NEWROOT']
rows = [
    ('B-tree entries (INSERT_LEAF+INSERT_POST)', BT_ENTRY),
    ('B-tree INSERT_UPPER+SPLIT_L/R+NEWROOT', BT_STRUCT),
    ('B-tree DEDUP', ['Btree/DEDUP']),
    ('B-tree DELETE (dead-item cleanup)', ['Btree/DELETE']),
    ('Heap INSERT', ['Heap/INSERT']),
    ('Heap UPDATE (non-HOT)', ['Heap/UPDATE']),
    ('Heap HOT_UPDATE', ['Heap/HOT_UPDATE']),
    ('Heap LOCK', ['Heap/LOCK']),
    ('Heap DELETE', ['Heap/DELETE']),
    ('Heap2 PRUNE', ['Heap2/PRUNE']),
    ('Heap2 other', ['Heap2/MULTI_INSERT', 'Heap2/VISIBLE', 'Heap2/LOCK_UPDATED', 'Heap2/NEW_CID']),
    ('BRIN records', ['BRIN/SAMEPAGE_UPDATE', 'BRIN/UPDATE', 'BRIN/INSERT', 'BRIN/REVMAP_EXTEND']),
    ('other records (commit, sequence, standby, xlog)', ['Transaction/COMMIT', 'Sequence/LOG', 'Standby/RUNNING_XACTS', 'XLOG/FPI_FOR_HINT', 'XLOG/FPI']),
    ('WAL records, all', ['records']),
    ('WAL bytes', ['bytes']),
    ('of which full-page images', ['fpi_bytes']),
]
def table(phases, title):
    print(f'\n#### {title}\n')
    hdr = '| per intent | ' + ' | '.join(designs) + ' |'
    print(hdr); print('|---' * (len(designs) + 1) + '|')
    for label, keys in rows:
        cells = []
        for d in designs:
            x = sum(walmetric(d, p, keys) for p in phases)
            cells.append(f'{x:.0f}' if 'bytes' in label else f'{x:.2f}')
        print(f'| {label} | ' + ' | '.join(cells) + ' |')

def unknown_keys():
    known = set(k for _, ks in rows for k in ks)
    out = collections.Counter()
    for d in designs:
        for run in S[d]:
            for (ph, k), v in W[d][run].items():
                if k not in known and k not in ('records',):
                    out[(d, ph, k)] += v
    return out

HEAP = ['Heap/INSERT', 'Heap/UPDATE', 'Heap/HOT_UPDATE', 'Heap/LOCK', 'Heap/DELETE']


def cpu_med(d, key):
    return med([v[key] / v['n'] / 1000 for v in S[d].values()])


def nofpi(d, phase):
    return med([(W[d][run][(phase, 'bytes')] - W[d][run][(phase, 'fpi_bytes')]) / S[d][run]['n'] for run in S[d]])


print('#### Summary, per delivered intent (medians over the runs; enqueue = the load)\n')
print('| design | runs | B-tree entries drain / enqueue / both | heap records (INSERT, UPDATE, HOT_UPDATE, LOCK, DELETE) drain + enqueue '
      '| WAL bytes drain | WAL bytes enqueue | WAL bytes both (without the drain\'s full-page images) '
      '| backend CPU µs drain / enqueue / both |')
print('|---|---|---|---|---|---|---|---|')
for d in designs:
    bd, bl = walmetric(d, 'drain', BT_ENTRY), walmetric(d, 'load', BT_ENTRY)
    hp = walmetric(d, 'drain', HEAP) + walmetric(d, 'load', HEAP)
    wd, wl = walmetric(d, 'drain', ['bytes']), walmetric(d, 'load', ['bytes'])
    cd, cl = cpu_med(d, 'drain_ns'), cpu_med(d, 'load_ns')
    print(f'| {d} | {len(S[d])} | {bd:.2f} / {bl:.2f} / {bd + bl:.2f} | {hp:.2f} | {wd:,.0f} | {wl:,.0f} '
          f'| {wd + wl:,.0f} ({nofpi(d, "drain") + wl:,.0f}) | {cd:.1f} / {cl:.1f} / {cd + cl:.1f} |')

table(['claim'], 'Drain, claim phase (claim_due or equivalent, its commit)')
table(['record'], 'Drain, record phase (record or equivalent, its commit)')
table(['drain'], 'Drain, whole (LSN before/after the drain; includes anything else in that window)')
table(['load'], 'Load (enqueue: INSERT into intents (+ queue), a commit per 256)')

print('\n#### Backend CPU, µs per intent (schedstat ns of the draining backend; all runs, then median)\n')
print('| design | drain runs | drain median | claim median | record median | drain µs by /proc stat ticks (median) | drain wall s (median) | load runs | load median | load wall s (median) |')
print('|---|---|---|---|---|---|---|---|---|---|')
for d in designs:
    rs = [S[d][k] for k in sorted(S[d])]
    dr = [v['drain_ns'] / v['n'] / 1000 for v in rs]
    cl = [v['claim_ns'] / v['n'] / 1000 for v in rs]
    rc = [v['record_ns'] / v['n'] / 1000 for v in rs]
    tk = [v['drain_tk'] / v['n'] / 1000 for v in rs]
    ld = [v['load_ns'] / v['n'] / 1000 for v in rs]
    print(f'| {d} | ' + ', '.join(f'{x:.1f}' for x in dr) + f' | **{med(dr):.1f}** | {med(cl):.1f} | {med(rc):.1f} | {med(tk):.1f} | {med([v["drain_s"] for v in rs]):.2f} | '
          + ', '.join(f'{x:.1f}' for x in ld) + f' | **{med(ld):.1f}** | {med([v["load_s"] for v in rs]):.2f} |')
left = {d: [int(v['left']) for v in S[d].values()] for d in designs}
print('\nRows left not succeeded after each drain:', left)
print('\nBatches per drain:', {d: sorted(set(int(v["batches"]) for v in S[d].values())) for d in designs})
u = unknown_keys()
if u:
    print('\nRecord types not in the rows above (total over runs):', dict(u))

# WAL bytes without full-page images, and records/bytes per type (median run), per phase
print('\n#### WAL bytes per intent without full-page images (median over runs)\n')
print('| phase | ' + ' | '.join(designs) + ' |'); print('|---' * (len(designs) + 1) + '|')
for ph in ['claim', 'record', 'drain', 'load']:
    cells = []
    for d in designs:
        vals = [(W[d][run][(ph, 'bytes')] - W[d][run][(ph, 'fpi_bytes')]) / S[d][run]['n'] for run in S[d]]
        cells.append(f'{med(vals):.0f}')
    print(f'| {ph} | ' + ' | '.join(cells) + ' |')

if os.path.exists(f'{RES}/byrel.csv'):
    B = collections.defaultdict(lambda: collections.defaultdict(collections.Counter))
    runs_seen = collections.defaultdict(set)
    for r in csv.reader(open(f'{RES}/byrel.csv')):
        d, run, ph, rel, rm, rt, cnt, ln = r
        if int(run) not in S[d]:
            continue
        runs_seen[d].add(int(run))
        B[d][(ph, rel, rm, rt.replace('+INIT', ''))]['n'] += int(cnt)
        B[d][(ph, rel, rm, rt.replace('+INIT', ''))]['b'] += int(ln)
    print('\n#### Heap, Heap2 and B-tree records per intent by relation (mean over the runs that logged it; count / bytes incl. FPI)\n')
    for d in designs:
        if d not in B:
            continue
        k = len(runs_seen[d]); n = sum(S[d][run]['n'] for run in runs_seen[d])
        print(f'\n{d} ({k} runs):\n')
        print('| phase | relation | record | per intent | bytes per intent |'); print('|---|---|---|---|---|')
        for key in sorted(B[d]):
            c = B[d][key]
            if c['n'] / n >= 0.005:
                print(f'| {key[0]} | {key[1]} | {key[2]}/{key[3]} | {c["n"]/n:.3f} | {c["b"]/n:.0f} |')

# paired within a round (designs of one round ran within ~1 minute of each other)
print('\n#### Drain backend CPU relative to d0 and to d0s, paired by round (median of the per-round ratios; all rounds)\n')
print('| design | drain / d0 (median, min-max) | drain / d0s (median, min-max) | claim / d0s claim | record / d0s record | load / d0 load |')
print('|---|---|---|---|---|---|')
for d in designs if 'd0' in S and 'd0s' in S else []:
    rr = sorted(set(S[d]) & set(S['d0']) & set(S['d0s']))
    if not rr:
        continue
    a = [S[d][k]['drain_ns'] / S['d0'][k]['drain_ns'] for k in rr]
    b = [S[d][k]['drain_ns'] / S['d0s'][k]['drain_ns'] for k in rr]
    c = [S[d][k]['claim_ns'] / S['d0s'][k]['claim_ns'] for k in rr]
    e = [S[d][k]['record_ns'] / S['d0s'][k]['record_ns'] for k in rr]
    l = [S[d][k]['load_ns'] / S['d0'][k]['load_ns'] for k in rr]
    f = lambda xs: f'{med(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})'
    print(f'| {d} | {f(a)} | {f(b)} | {med(c):.2f} | {med(e):.2f} | {f(l)} |')
