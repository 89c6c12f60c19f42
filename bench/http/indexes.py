"""Benchmarks of Chaise's constraint and synchronous indexes (issue 11 parts 3 and 4).

  python3 indexes.py BASE race CLIENTS EMAILS SECONDS
      CLIENTS threads POST documents claiming random emails out of EMAILS, against a database
      with a unique Mango index on "email" (POST /_index "unique": true): claims/s, how many
      succeeded and were refused, and whether every email ended with exactly one owner. A server
      without unique indexes (CouchDB) accepts every claim: the owners check shows duplicates.
  python3 indexes.py BASE after-write MODE N
      Query-after-write latency: N times, PUT a document, then POST /_find for it (update:
      true, the default) and check it is found. MODE "lazy" (a plain index) or "sync" (created
      with "sync_index": true). Prints p50/p99 of the _find and of write+find.
Basic auth from the BENCH_AUTH_HEADER environment variable (run.sh sets it).
"""
import http.client
import json
import os
import random
import sys
import threading
import time
import urllib.parse

AUTH = os.environ.get("BENCH_AUTH_HEADER", "")


class Client:
    def __init__(self, base):
        u = urllib.parse.urlsplit(base)
        conn = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        self.conn = conn(u.hostname, u.port, timeout=120)

    def call(self, method, path, body=None):
        headers = {"Content-Type": "application/json"}
        if AUTH:
            headers["Authorization"] = AUTH
        self.conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
        r = self.conn.getresponse()
        data = r.read()
        return r.status, (json.loads(data) if data else None)


def fresh_db(c, db):
    c.call("DELETE", "/" + db)
    status, _ = c.call("PUT", "/" + db)
    assert status == 201, status


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p / 100))] if values else 0


def race(base, clients, emails, seconds):
    c = Client(base)
    db = "benchrace"
    fresh_db(c, db)
    status, body = c.call("POST", "/%s/_index" % db,
                          {"index": {"fields": ["email"]}, "name": "email", "unique": True})
    unique = status == 200
    counts = {"created": 0, "refused": 0, "other": 0}
    lock = threading.Lock()
    deadline = time.time() + seconds

    def work(seed):
        cl = Client(base)
        rng = random.Random(seed)
        mine = {"created": 0, "refused": 0, "other": 0}
        while time.time() < deadline:
            status, _ = cl.call("POST", "/" + db, {"email": "user%d@example.com" % rng.randrange(emails)})
            mine["created" if status == 201 else "refused" if status == 409 else "other"] += 1
        with lock:
            for k in counts:
                counts[k] += mine[k]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(clients)]
    start = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.time() - start
    owners = {}
    _, all_docs = c.call("GET", "/%s/_all_docs?include_docs=true" % db)
    for row in all_docs["rows"]:
        e = row["doc"].get("email")
        if e:
            owners[e] = owners.get(e, 0) + 1
    dup = sum(1 for n in owners.values() if n > 1)
    total = sum(counts.values())
    print("race  %d clients claiming %d emails%s: %.0f claims/s, %d created, %d refused, %d other, "
          "%d emails owned, %d owned twice or more" %
          (clients, emails, "" if unique else " (no unique index: %s)" % (body or {}).get("reason"),
           total / elapsed, counts["created"], counts["refused"], counts["other"], len(owners), dup))


def after_write(base, mode, n):
    c = Client(base)
    db = "benchafter"
    fresh_db(c, db)
    idx = {"index": {"fields": ["k"]}, "ddoc": "k", "name": "k"}
    if mode == "sync":
        idx["sync_index"] = True
    status, body = c.call("POST", "/%s/_index" % db, idx)
    if status != 200:
        print("after %s index: refused (%s)" % (mode, (body or {}).get("reason")))
        return
    for i in range(200):  # something to build from
        c.call("PUT", "/%s/pre%d" % (db, i), {"k": -i})
    c.call("POST", "/%s/_find" % db, {"selector": {"k": -1}, "use_index": "k"})
    find_ms, total_ms, missing = [], [], 0
    for i in range(n):
        t0 = time.perf_counter()
        status, _ = c.call("PUT", "/%s/d%d" % (db, i), {"k": i + 1})
        assert status == 201, status
        t1 = time.perf_counter()
        status, r = c.call("POST", "/%s/_find" % db, {"selector": {"k": i + 1}, "use_index": "k"})
        t2 = time.perf_counter()
        if status != 200 or len(r["docs"]) != 1:
            missing += 1
        find_ms.append((t2 - t1) * 1000)
        total_ms.append((t2 - t0) * 1000)
    print("after %s index: _find right after the write's 201: p50 %.2f ms, p99 %.2f ms; write+find "
          "p50 %.2f ms, p99 %.2f ms; %d of %d not found" %
          (mode, pct(find_ms, 50), pct(find_ms, 99), pct(total_ms, 50), pct(total_ms, 99), missing, n))


if __name__ == "__main__":
    base, what = sys.argv[1], sys.argv[2]
    if what == "race":
        race(base, int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
    else:
        after_write(base, sys.argv[3], int(sys.argv[4]))
