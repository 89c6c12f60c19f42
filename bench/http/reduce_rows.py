#!/usr/bin/env python3
"""Reduce over a large view, for any CouchDB-compatible server (Chaise, CouchDB).

  bench/http/reduce_rows.py http://127.0.0.1:5984 [DOCS] [EMITS]   (BENCH_AUTH=user:password)

Loads DOCS documents (default 10,000), each emitting EMITS rows (default 100: a million rows),
into views with a built-in _sum and a JavaScript sum, and measures, one client:
  build         first query: both indexes built (rows/s)
  reduce        group=false over every row (s), median of 5
  range         group=false over the middle half of the keys (s), median of 5
  group_level   group_level=1 over every row: 100 groups (s), median of 5
The reduce queries are the ones a persistent reduce tree answers in O(log n) reads.
"""
import base64
import json
import os
import statistics
import sys
import time
import urllib.request

BASE = sys.argv[1].rstrip("/") if len(sys.argv) > 1 else "http://127.0.0.1:5984"
DOCS = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
EMITS = int(sys.argv[3]) if len(sys.argv) > 3 else 100
AUTH = os.environ.get("BENCH_AUTH")
DB = "bench_reduce_rows"


def call(method, path, body=None):
    headers = {"Content-Type": "application/json"}
    if AUTH:
        headers["Authorization"] = "Basic " + base64.b64encode(AUTH.encode()).decode()
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=3600) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        return json.loads(e.read())


def median_time(f, n=5):
    times = []
    result = None
    for _ in range(n):
        t = time.time()
        result = f()
        times.append(time.time() - t)
    return result, round(statistics.median(times), 4)


def main():
    call("DELETE", "/" + DB)
    call("PUT", "/" + DB)
    for start in range(0, DOCS, 1000):
        call("POST", f"/{DB}/_bulk_docs",
             {"docs": [{"_id": f"d{i:08d}", "i": i} for i in range(start, min(DOCS, start + 1000))]})
    emit = ("function(doc) { for (var j = 0; j < %d; j++) emit([j %% 100, doc.i, j], doc.i %% 7); }"
            % EMITS)
    call("PUT", f"/{DB}/_design/r", {"views": {
        "sum": {"map": emit, "reduce": "_sum"},
        "js": {"map": emit, "reduce": "function(k, v, re) { return sum(v); }"},
    }})
    out = {"server": BASE, "rows": DOCS * EMITS}
    t = time.time()
    call("GET", f"/{DB}/_design/r/_view/sum?limit=1&reduce=false")
    out["build rows/s"] = round(DOCS * EMITS / (time.time() - t))
    expected = sum((i % 7) for i in range(DOCS)) * EMITS
    for view in ("sum", "js"):
        r, out[f"reduce {view} s"] = median_time(lambda: call("GET", f"/{DB}/_design/r/_view/{view}"))
        assert r["rows"][0]["value"] == expected, r
        q = "startkey=%5B25%5D&endkey=%5B75%5D"
        _, out[f"range {view} s"] = median_time(lambda: call("GET", f"/{DB}/_design/r/_view/{view}?{q}"))
        r, out[f"group_level=1 {view} s"] = median_time(
            lambda: call("GET", f"/{DB}/_design/r/_view/{view}?group_level=1"))
        assert len(r["rows"]) == min(100, EMITS), r
    print(json.dumps(out, indent=1))
    call("DELETE", "/" + DB)


if __name__ == "__main__":
    main()
