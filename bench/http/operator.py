#!/usr/bin/env python3
"""The operator endpoints' costs, against Chaise or CouchDB alike:

  operator.py purge URL         10,000 documents written, then all purged, 100 per request (the
                                default [purge] max_document_id_number; 100 requests): the total,
                                p50 and max of the requests, and the doc_count left
  operator.py db_updates URL    a longpoll GET /_db_updates?since=now waiting while a PUT to one
                                database is acknowledged, 20 times (a second apart, so that each
                                round's answer is its own PUT's): from the PUT's answer to the
                                feed's, p50 and max

BENCH_AUTH (user:password) authenticates every request.
"""
import sys, threading, time

from client import Client, quantile

mode = sys.argv[1]
client = Client(sys.argv[2])
req = client.req


def quantiles(ms):
    return "p50 %.1f ms, max %.1f ms" % (quantile(ms, 0.5), max(ms))


db = "/operator_bench_%d" % int(time.time() * 1000)
req("PUT", db)
if mode == "purge":
    revs = {}
    for start in range(0, 10000, 2000):
        docs = [{"_id": "d%05d" % i, "v": i, "text": "x" * 200} for i in range(start, start + 2000)]
        revs.update({r["id"]: r["rev"] for r in req("POST", db + "/_bulk_docs", {"docs": docs})})
    ids = sorted(revs)
    took = []
    for k in range(100):
        batch = {i: [revs[i]] for i in ids[k * 100:(k + 1) * 100]}
        t0 = time.perf_counter()
        out = req("POST", db + "/_purge", batch)
        took.append((time.perf_counter() - t0) * 1000)
        assert all(len(v) == 1 for v in out["purged"].values()), out
    print("_purge of 10,000 documents, 100 per request: %.2f s in all, %s; doc_count after: %d"
          % (sum(took) / 1000, quantiles(took), req("GET", db)["doc_count"]))
elif mode == "db_updates":
    took = []
    for i in range(20):
        # The events before this round have reached the feed (both servers fold them in the
        # background): the round's answer is its own PUT's.
        time.sleep(1)
        got = {}

        def poll():
            got["body"] = req("GET", "/_db_updates?feed=longpoll&since=now&timeout=10000")
            got["t"] = time.perf_counter()

        waiter = threading.Thread(target=poll)
        waiter.start()
        time.sleep(0.3)  # the feed is waiting
        req("PUT", "%s/d%d" % (db, i), {})
        acked = time.perf_counter()
        waiter.join()
        took.append((got["t"] - acked) * 1000)
    print("PUT acknowledged -> longpoll _db_updates answered, 20 times: %s" % quantiles(took))
else:
    sys.exit(__doc__)
req("DELETE", db)
