#!/usr/bin/env python3
"""Map/reduce view benchmark for any CouchDB-compatible server (Chaise, CouchDB).

  bench/http/views.py http://127.0.0.1:5984 [DOCS]     (BENCH_AUTH=user:password for Basic auth)

Loads DOCS (default 200,000) small documents with _bulk_docs, then measures, one client:
  build        first query of a map view: the whole index is built (docs/s)
  incremental  1,000 documents changed, then a query (s)
  rows         the whole view streamed, include_docs=false and =true (rows/s)
  reduce       group=false over every row: built-in _sum and a JavaScript sum (s)
  group        group=true over the _count view (s)
  vdu          single-document PUTs, and _bulk_docs of 20 x 1,000 docs, with a validate_doc_update
               present vs none, one client (docs/s)
  find         _find {"n": {"$gte": DOCS-100}} (100 matches) without an index, then with a
               json index on n (s per query, the index build excluded)
"""
import base64
import json
import os
import sys
import time
import urllib.error
import urllib.request

BASE = sys.argv[1].rstrip("/") if len(sys.argv) > 1 else "http://127.0.0.1:5984"
DOCS = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
AUTH = os.environ.get("BENCH_AUTH")
DB = "bench_views"


def call(method, path, body=None, raw=False):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(BASE + path, method=method, data=data,
                                 headers={"Content-Type": "application/json"})
    if AUTH:
        req.add_header("Authorization", "Basic " + base64.b64encode(AUTH.encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=3600) as r:
            payload = r.read()
    except urllib.error.HTTPError as e:
        payload = e.read()
        if e.code >= 400 and not (method == "DELETE" and e.code == 404):
            raise SystemExit(f"{method} {path}: {e.code} {payload[:300]!r}")
    return payload if raw else json.loads(payload or b"null")


def timed(f):
    t0 = time.perf_counter()
    r = f()
    return r, time.perf_counter() - t0


def main():
    call("DELETE", "/" + DB)
    call("PUT", "/" + DB)
    batch = 1000
    for start in range(0, DOCS, batch):
        docs = [{"_id": f"d{i:08d}", "n": i, "t": f"t{i % 10}", "s": "x" * 40}
                for i in range(start, min(DOCS, start + batch))]
        call("POST", f"/{DB}/_bulk_docs", {"docs": docs})
    call("PUT", f"/{DB}/_design/b", {"views": {
        "by_n": {"map": "function(doc) { emit(doc.n, null); }"},
        "sum": {"map": "function(doc) { emit(doc.t, doc.n); }", "reduce": "_sum"},
        "jssum": {"map": "function(doc) { emit(doc.t, doc.n); }",
                  "reduce": "function(k, v, re) { return sum(v); }"},
        "count": {"map": "function(doc) { emit(doc.t, null); }", "reduce": "_count"},
    }})
    out = {}
    _, t = timed(lambda: call("GET", f"/{DB}/_design/b/_view/by_n?limit=1"))
    out["build docs/s"] = round(DOCS / t)
    docs = call("GET", f"/{DB}/_all_docs?include_docs=true&limit=1000&startkey=%22d%22")["rows"]
    changed = [dict(r["doc"], n=r["doc"]["n"] + 1) for r in docs]
    call("POST", f"/{DB}/_bulk_docs", {"docs": changed})
    _, t = timed(lambda: call("GET", f"/{DB}/_design/b/_view/by_n?limit=1"))
    out["incremental 1000 docs s"] = round(t, 3)
    body, t = timed(lambda: call("GET", f"/{DB}/_design/b/_view/by_n", raw=True))
    rows = body.count(b'"id":')
    out["rows/s"] = round(rows / t)
    body, t = timed(lambda: call("GET", f"/{DB}/_design/b/_view/by_n?include_docs=true", raw=True))
    out["rows/s include_docs"] = round(body.count(b'"id":') / t)
    _, t = timed(lambda: call("GET", f"/{DB}/_design/b/_view/sum"))
    out["reduce _sum s"] = round(t, 3)
    _, t = timed(lambda: call("GET", f"/{DB}/_design/b/_view/jssum"))
    out["reduce js s"] = round(t, 3)
    _, t = timed(lambda: call("GET", f"/{DB}/_design/b/_view/count?group=true"))
    out["group=true _count s"] = round(t, 3)
    # Mango: a selective query without an index (a scan) and with one.
    sel = {"selector": {"n": {"$gte": DOCS - 100}}, "limit": 200}
    res, t = timed(lambda: call("POST", f"/{DB}/_find", sel))
    out["_find no index s"] = round(t, 3)
    out["_find no index docs"] = len(res["docs"])
    call("POST", f"/{DB}/_index", {"index": {"fields": ["n"]}, "name": "by_n", "ddoc": "mango"})
    _, t = timed(lambda: call("POST", f"/{DB}/_find", sel))
    out["_find index first (build) s"] = round(t, 3)
    res, t = timed(lambda: call("POST", f"/{DB}/_find", sel))
    out["_find index s"] = round(t, 3)
    out["_find index docs"] = len(res["docs"])
    # Writes with a validate_doc_update present vs without (one client, sequential PUTs).
    n = 500
    _, t = timed(lambda: [call("PUT", f"/{DB}/plain{i}", {"n": i}) for i in range(n)])
    out["PUT docs/s no vdu"] = round(n / t)
    bulk = lambda prefix: [call("POST", f"/{DB}/_bulk_docs",
                                {"docs": [{"_id": f"{prefix}{b}_{i}", "n": i} for i in range(1000)]})
                           for b in range(20)]
    _, t = timed(lambda: bulk("bulkplain"))
    out["_bulk_docs docs/s no vdu"] = round(20_000 / t)
    call("PUT", f"/{DB}/_design/v", {"validate_doc_update":
                                      "function(n, o, u) { if (n.bad) throw({forbidden: 'bad'}); }"})
    _, t = timed(lambda: [call("PUT", f"/{DB}/vdu{i}", {"n": i}) for i in range(n)])
    out["PUT docs/s with vdu"] = round(n / t)
    _, t = timed(lambda: bulk("bulkvdu"))
    out["_bulk_docs docs/s with vdu"] = round(20_000 / t)
    print(json.dumps({"server": BASE, "docs": DOCS, **out}, indent=1))
    call("DELETE", "/" + DB)


if __name__ == "__main__":
    main()
