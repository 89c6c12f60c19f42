#!/usr/bin/env python3
"""Loads documents d<FROM> .. d<TO-1> (ids zero-padded to 8 digits, ~130-byte bodies) into a
database through _bulk_docs, 1,000 per request, from 4 keep-alive connections.

  load_docs.py BASE_URL DB FROM TO

BENCH_AUTH_HEADER="Basic ..." is sent on every request. Prints docs/s.
"""
import http.client
import json
import os
import sys
import threading
import time
import urllib.parse

base, db, first, last = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
url = urllib.parse.urlparse(base)
headers = {"Content-Type": "application/json"}
if os.environ.get("BENCH_AUTH_HEADER"):
    headers["Authorization"] = os.environ["BENCH_AUTH_HEADER"]
batches = list(range(first, last, 1000))
lock = threading.Lock()
errors = []


def worker():
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=120)
    while True:
        with lock:
            if not batches:
                return
            start = batches.pop()
        docs = [{"_id": "d%08d" % i, "type": "row", "n": i, "note": "x" * 100}
                for i in range(start, min(start + 1000, last))]
        conn.request("POST", f"/{db}/_bulk_docs", json.dumps({"docs": docs}), headers)
        r = conn.getresponse()
        body = r.read()
        if r.status != 201:
            errors.append((r.status, body[:200]))
            return


t0 = time.time()
threads = [threading.Thread(target=worker) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
if errors:
    sys.exit(f"load failed: {errors[0]}")
print(f"load  {last - first} docs (d{first:08d}..) via _bulk_docs (4 clients): {round((last - first) / (time.time() - t0))} docs/s")
