#!/usr/bin/env python3
"""What keeping revision history costs: stored bytes per edit of a 4 KB document.

  bench/http/history.py http://127.0.0.1:5984 [EDITS]    (BENCH_AUTH=user:password for Basic auth)

Creates the database bench_history, writes one ~4 KB document (a 4,000-character text field and a
counter), then EDITS times (default 1,000) changes the counter only, one PUT after the other. Reports
the growth of GET /bench_history's sizes.active and sizes.file per edit (both servers keep every
superseded body until compaction: CouchDB whole, Chaise as a delta), the edits per second, and the
same sizes after POST /_compact. The database is deleted at the end.
"""
import base64
import json
import os
import sys
import time
import urllib.error
import urllib.request

BASE = sys.argv[1].rstrip("/") if len(sys.argv) > 1 else "http://127.0.0.1:5984"
EDITS = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
AUTH = os.environ.get("BENCH_AUTH")
DB = "bench_history"


def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if AUTH:
        req.add_header("Authorization", "Basic " + base64.b64encode(AUTH.encode()).decode())
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def sizes():
    status, info = call("GET", "/" + DB)
    assert status == 200, info
    return info["sizes"]["active"], info["sizes"]["file"]


def main():
    call("DELETE", "/" + DB)
    status, body = call("PUT", "/" + DB)
    assert status in (201, 202), body
    words = " ".join("word%d" % (i % 10) for i in range(800))[:4000]
    doc = {"text": words, "n": 0, "tags": ["a", "b"]}
    status, body = call("PUT", "/%s/doc" % DB, doc)
    assert status in (201, 202), body
    rev = body["rev"]
    middle_rev = None
    active0, file0 = sizes()
    started = time.perf_counter()
    for i in range(1, EDITS + 1):
        doc["n"] = i
        doc["_rev"] = rev
        status, body = call("PUT", "/%s/doc" % DB, doc)
        assert status in (201, 202), body
        rev = body["rev"]
        if i == EDITS // 2:
            middle_rev = rev
    took = time.perf_counter() - started
    time.sleep(1)  # CouchDB updates its size counters shortly after the writes
    active1, file1 = sizes()
    # Whether an old revision still reads back (CouchDB's automatic compaction, smoosh, may have
    # run meanwhile and removed it; revisions beyond revs_limit, 1,000, are stemmed anyway).
    status, body = call("GET", "/%s/doc?rev=%s" % (DB, middle_rev))
    middle_readable = status == 200 and body.get("n") == EDITS // 2
    if not middle_readable:
        print("GET ?rev=%s: %s %s" % (middle_rev, status, str(body)[:200]))
    call("POST", "/%s/_compact" % DB, {})
    for _ in range(100):  # CouchDB compacts in the background
        time.sleep(0.2)
        status, info = call("GET", "/" + DB)
        if not info.get("compact_running"):
            break
    active2, file2 = sizes()
    print("server: %s, document: %d bytes of JSON, %d edits" % (BASE.split("@")[-1], len(json.dumps(doc)), EDITS))
    print("sizes.active per edit: %.0f bytes (%d -> %d)" % ((active1 - active0) / EDITS, active0, active1))
    print("sizes.file per edit:   %.0f bytes (%d -> %d)" % ((file1 - file0) / EDITS, file0, file1))
    print("edits/s (one client):  %.0f" % (EDITS / took))
    print("revision %d of %d readable before _compact: %s" % (EDITS // 2 + 1, EDITS + 1,
                                                            "yes" if middle_readable else "no"))
    print("after _compact: sizes.active %d, sizes.file %d" % (active2, file2))
    call("DELETE", "/" + DB)


if __name__ == "__main__":
    main()
