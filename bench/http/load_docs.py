#!/usr/bin/env python3
"""Loads documents d<FROM> .. d<TO-1> (ids zero-padded to 8 digits, ~130-byte bodies) into a
database through _bulk_docs, 1,000 per request, from 4 keep-alive connections.

  load_docs.py BASE_URL DB FROM TO
  load_docs.py --edit BASE_URL DB FROM TO

With --edit, the documents (loaded before) get a new revision each, as a client keeping
documents up to date does: for every 1,000 ids their current revisions from one POST _all_docs
with "keys", then one _bulk_docs with the new bodies; every edit must succeed.

BENCH_AUTH_HEADER="Basic ..." is sent on every request. Prints docs/s (edits/s: both requests of
each batch counted), and the server's CPU per document when BENCH_PID names its process.
"""
import http.client
import json
import os
import sys
import threading
import time
import urllib.parse

args = sys.argv[1:]
editing = bool(args) and args[0] == "--edit"
if editing:
    args = args[1:]
base, db, first, last = args[0], args[1], int(args[2]), int(args[3])
url = urllib.parse.urlparse(base)
headers = {"Content-Type": "application/json"}
if os.environ.get("BENCH_AUTH_HEADER"):
    headers["Authorization"] = os.environ["BENCH_AUTH_HEADER"]
batches = list(range(first, last, 1000))
lock = threading.Lock()
errors = []


def post(conn, path, payload):
    conn.request("POST", f"/{db}/{path}", json.dumps(payload), headers)
    r = conn.getresponse()
    return r.status, r.read()


def new_docs(conn, start, end):
    return [{"_id": "d%08d" % i, "type": "row", "n": i, "note": "x" * 100}
            for i in range(start, end)]


def edited_docs(conn, start, end):
    status, body = post(conn, "_all_docs", {"keys": ["d%08d" % i for i in range(start, end)]})
    if status != 200:
        errors.append((status, body[:200]))
        return None
    rows = json.loads(body)["rows"]
    if any("value" not in row for row in rows):
        errors.append(("a document to edit is missing", body[:200]))
        return None
    return [{"_id": row["id"], "_rev": row["value"]["rev"], "type": "row", "n": start + k,
             "note": "y" * 100} for k, row in enumerate(rows)]


def worker():
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=120)
    while True:
        with lock:
            if not batches or errors:
                return
            start = batches.pop()
        docs = (edited_docs if editing else new_docs)(conn, start, min(start + 1000, last))
        if docs is None:
            return
        status, body = post(conn, "_bulk_docs", {"docs": docs})
        if status != 201 or any("error" in item for item in json.loads(body)):
            errors.append((status, body[:200]))
            return


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


pid = os.environ.get("BENCH_PID")
c0 = cpu_seconds(pid) if pid else None
t0 = time.time()
threads = [threading.Thread(target=worker) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
elapsed = time.time() - t0
if errors:
    sys.exit(f"{'edit' if editing else 'load'} failed: {errors[0]}")
n = last - first
line = (f"edit  {n} docs (d{first:08d}..) via _all_docs + _bulk_docs (4 clients): "
        f"{round(n / elapsed)} edits/s" if editing else
        f"load  {n} docs (d{first:08d}..) via _bulk_docs (4 clients): {round(n / elapsed)} docs/s")
if c0 is not None:
    line += f", server CPU {round((cpu_seconds(pid) - c0) / n * 1e6, 1)} us per document"
print(line)
