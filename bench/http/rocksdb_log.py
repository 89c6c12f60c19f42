#!/usr/bin/env python3
"""Sums up a RocksDB LOG per column family: bytes flushed, compactions (and why), their input
bytes, trivial moves (files moved down a level without being rewritten) and write stalls.

    BENCH_ROCKSDB_LOG=/tmp/store.LOG WORKLOADS=bulk bench/http/run.sh --chaise
    bench/http/rocksdb_log.py /tmp/store.LOG
"""
import collections
import json
import re
import sys


def main(path):
    with open(path, errors="replace") as f:
        lines = f.read().splitlines()
    job_cf = {}
    moves = collections.Counter()
    stalls = 0
    for line in lines:
        m = re.search(r"\[([\w.-]+)\] \[JOB (\d+)\] (Compacting|Flushing)", line)
        if m:
            job_cf[int(m.group(2))] = m.group(1)
        m = re.search(r"\[([\w.-]+)\] Moving #\d+ to level-\d+", line)
        if m:
            moves[m.group(1)] += 1
        if "Stalling writes" in line or "Stopping writes" in line:
            stalls += 1
    flushed = collections.Counter()
    compactions = collections.Counter()
    compacted = collections.Counter()
    reasons = collections.defaultdict(collections.Counter)
    for line in lines:
        i = line.find("EVENT_LOG_v1")
        if i < 0:
            continue
        ev = json.loads(line[i + len("EVENT_LOG_v1"):])
        cf = job_cf.get(ev.get("job"), "?")
        if ev.get("event") == "flush_started":
            flushed[cf] += ev.get("total_data_size", 0)
        elif ev.get("event") == "compaction_started":
            compactions[cf] += 1
            compacted[cf] += ev.get("input_data_size", 0)
            reasons[cf][ev.get("compaction_reason", "?")] += 1
    mib = 1 << 20
    print(f"{'column family':16s} {'flushed':>9s} {'compactions':>11s} {'input':>9s} {'moves':>5s}  reasons")
    for cf in sorted(set(flushed) | set(compactions) | set(moves)):
        why = ", ".join(f"{r} {n}" for r, n in reasons[cf].most_common())
        print(f"{cf:16s} {flushed[cf] / mib:6.0f} MiB {compactions[cf]:11d} "
              f"{compacted[cf] / mib:5.0f} MiB {moves[cf]:5d}  {why}")
    print(f"write stalls logged: {stalls}")


if __name__ == "__main__":
    main(sys.argv[1])
