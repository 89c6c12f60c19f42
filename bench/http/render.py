#!/usr/bin/env python3
"""Show and list functions' costs, against Chaise or CouchDB alike:

  render.py show URL    1,000 documents; GET _show/page/<id> 400 times one after another (p50, p99)
                        and then from 4 clients at once (requests per second)
  render.py list URL    20,000 documents; GET _list/lines/by_n over the view's 20,000 rows (a line
                        each, 0.2 MB) 10 times, the index built first: p50, max and MB/s

BENCH_AUTH (user:password) authenticates every request.
"""
import sys, threading, time

from client import Client, quantile

mode = sys.argv[1]
client = Client(sys.argv[2])
req, raw = client.req, client.raw

db = "/render_bench_%d" % int(time.time() * 1000)
req("PUT", db)
req("PUT", db + "/_design/r", {
    "shows": {"page": "function(doc, req) { return {body: '<h1>' + doc.title + '</h1><p>' + "
                      "doc.n + '</p>', headers: {'Content-Type': 'text/html'}}; }"},
    "lists": {"lines": "function(head, req) { start({headers: {'Content-Type': 'text/plain'}}); "
                       "var row; while ((row = getRow())) send(row.id + ' ' + row.key + '\\n'); }"},
    "views": {"by_n": {"map": "function(doc) { if (doc.n !== undefined) emit(doc.n, null); }"}},
})
count = 1000 if mode == "show" else 20000
for start in range(0, count, 1000):
    docs = [{"_id": "d%05d" % i, "n": i, "title": "document %d" % i} for i in range(start, start + 1000)]
    req("POST", db + "/_bulk_docs", {"docs": docs})

if mode == "show":
    took = []
    for i in range(400):
        t0 = time.perf_counter()
        body = raw("GET", db + "/_design/r/_show/page/d%05d" % (i * 7 % count))
        took.append((time.perf_counter() - t0) * 1000)
        assert body.startswith(b"<h1>document"), body
    done = [0]
    lock = threading.Lock()

    def client(k):
        for i in range(250):
            raw("GET", db + "/_design/r/_show/page/d%05d" % ((k * 250 + i) % count))
            with lock:
                done[0] += 1

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rate = done[0] / (time.perf_counter() - t0)
    print("_show of one document: p50 %.2f ms, p99 %.2f ms one at a time; %.0f requests/s from 4 clients"
          % (quantile(took, 0.5), quantile(took, 0.99), rate))
elif mode == "list":
    raw("GET", db + "/_design/r/_view/by_n?limit=1")  # the index is built before timing
    took, size = [], 0
    for _ in range(10):
        t0 = time.perf_counter()
        body = raw("GET", db + "/_design/r/_list/lines/by_n")
        took.append((time.perf_counter() - t0) * 1000)
        size = len(body)
        assert body.count(b"\n") == count, body[:200]
    p50 = quantile(took, 0.5)
    print("_list over %d rows (%.1f MB): p50 %.0f ms, max %.0f ms, %.1f MB/s"
          % (count, size / 1e6, p50, max(took), size / 1e6 / (p50 / 1000)))
else:
    sys.exit("usage: render.py show|list URL")
req("DELETE", db)
