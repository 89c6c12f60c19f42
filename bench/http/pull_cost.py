#!/usr/bin/env python3
"""What serving a replication's pull costs a CouchDB (or Chaise) source: the server's CPU seconds
(user + system from /proc/PID/stat, before and after) for each way of reading every document of
one database, the ways a replicator could ask for them.

  BENCH_AUTH=admin:admin bench/http/pull_cost.py URL PID [WAY ...]

URL is the server's base URL (credentials from BENCH_AUTH), PID its process (for CouchDB, the
beam.smp pid). The database `pullcost` is created and filled with DOCS (100000) small documents
once and kept for later runs. WAY, any of (default all): changes500 and changes2000 (_changes
style=all_docs in pages), changes_stream (one request), bulk_get500 (_bulk_get revs=true
latest=true in batches of 500, after one streamed _changes, which is counted too),
changes_docs (_changes include_docs=true), all_docs500 (_all_docs include_docs=true in pages).
"""
import base64
import json
import os
import sys
import time
import urllib.parse
import urllib.request

DOCS = int(os.environ.get("DOCS", "100000"))
DB = "pullcost"


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        sys.exit(2)
    base, pid = sys.argv[1].rstrip("/"), int(sys.argv[2])
    ways = sys.argv[3:] or ["changes500", "changes2000", "changes_stream", "bulk_get500",
                            "changes_docs", "all_docs500"]
    auth = "Basic " + base64.b64encode(os.environ["BENCH_AUTH"].encode()).decode()

    def req(method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        r = urllib.request.Request(base + path, data=data, method=method,
                                   headers={"Authorization": auth,
                                            "Content-Type": "application/json"})
        with urllib.request.urlopen(r, timeout=600) as f:
            return json.loads(f.read())

    def cpu_s():
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    try:
        req("GET", f"/{DB}")
    except urllib.error.HTTPError:
        req("PUT", f"/{DB}")
        for k in range(0, DOCS, 5000):
            docs = [{"_id": "d%07d" % i, "v": i, "pad": "x" * 100}
                    for i in range(k, min(k + 5000, DOCS))]
            req("POST", f"/{DB}/_bulk_docs", {"docs": docs})

    def paged_changes(limit):
        since, rows = 0, 0
        for _ in range(DOCS // limit + 2):
            a = req("GET", f"/{DB}/_changes?style=all_docs&limit={limit}&since={since}")
            if not a["results"]:
                break
            rows += len(a["results"])
            since = urllib.parse.quote(json.dumps(a["last_seq"]) if not isinstance(
                a["last_seq"], str) else a["last_seq"])
        return rows

    def bulk_get(batch):
        a = req("GET", f"/{DB}/_changes?style=all_docs")
        items = [{"id": r["id"], "rev": r["changes"][0]["rev"]} for r in a["results"]]
        n = 0
        for k in range(0, len(items), batch):
            b = req("POST", f"/{DB}/_bulk_get?revs=true&latest=true", {"docs": items[k:k + batch]})
            n += len(b["results"])
        return n

    def all_docs(batch):
        n, start = 0, None
        for _ in range(DOCS // batch + 2):
            q = f"/{DB}/_all_docs?include_docs=true&limit={batch}"
            if start is not None:
                q += "&skip=1&startkey=" + urllib.parse.quote(json.dumps(start))
            a = req("GET", q)
            if not a["rows"]:
                break
            n += len(a["rows"])
            start = a["rows"][-1]["id"]
        return n

    run = {
        "changes500": lambda: paged_changes(500),
        "changes2000": lambda: paged_changes(2000),
        "changes_stream": lambda: len(req("GET", f"/{DB}/_changes?style=all_docs")["results"]),
        "bulk_get500": lambda: bulk_get(500),
        "changes_docs": lambda: len(
            req("GET", f"/{DB}/_changes?style=all_docs&include_docs=true")["results"]),
        "all_docs500": lambda: all_docs(500),
    }
    for way in ways:
        c0, t0 = cpu_s(), time.time()
        n = run[way]()
        print(f"{way}: {n} documents, {time.time() - t0:.2f} s wall, "
              f"server {cpu_s() - c0:.2f} CPU-s", flush=True)


if __name__ == "__main__":
    main()
