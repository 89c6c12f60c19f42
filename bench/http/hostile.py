#!/usr/bin/env python3
"""What heavy and hostile requests cost a CouchDB-compatible server, and what they cost everyone
else (issue 12). Against any URL, so Chaise and CouchDB can be measured side by side:

  BENCH_AUTH=admin:admin bench/http/hostile.py http://127.0.0.1:5984 [IDS]

- `_revs_diff` and `_missing_revs` with IDS ids (default 20,000), one request each, timed;
- `GET /` latency (p50/p99/max over 4 s, one probe every 20 ms) while 8 clients keep sending
  IDS-id `_revs_diff` and 2,000-document `_bulk_docs` requests.
Uses a scratch database `bench_hostile` (deleted at the end). Standard library only.
"""
import base64
import http.client
import json
import os
import sys
import threading
import time
import urllib.parse


def main():
    url = urllib.parse.urlparse(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:5984")
    ids = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    headers = {"Content-Type": "application/json"}
    if os.environ.get("BENCH_AUTH"):
        headers["Authorization"] = "Basic " + base64.b64encode(os.environ["BENCH_AUTH"].encode()).decode()

    def connect():
        return http.client.HTTPConnection(url.hostname, url.port or 80, timeout=600)

    def request(conn, method, path, body=None):
        conn.request(method, path, body=body, headers=headers)
        r = conn.getresponse()
        return r.status, r.read()

    c = connect()
    request(c, "DELETE", "/bench_hostile")
    status, _ = request(c, "PUT", "/bench_hostile")
    assert status in (201, 202), status
    revs = json.dumps({f"d{i}": ["1-" + "a" * 32] for i in range(ids)})
    for path in ("/bench_hostile/_revs_diff", "/bench_hostile/_missing_revs"):
        t0 = time.monotonic()
        status, body = request(c, "POST", path, revs)
        took = time.monotonic() - t0
        assert status == 200, (status, body[:200])
        print(f"{path.split('/')[-1]:14} {ids} ids: {took:.3f} s")

    docs = json.dumps({"docs": [{"v": "v" * 200} for _ in range(2000)]})
    stop = threading.Event()
    done = [0]

    def heavy(n):
        conn = connect()
        while not stop.is_set():
            if n % 2 == 0:
                request(conn, "POST", "/bench_hostile/_revs_diff", revs)
            else:
                request(conn, "POST", "/bench_hostile/_bulk_docs", docs)
            done[0] += 1

    threads = [threading.Thread(target=heavy, args=(n,), daemon=True) for n in range(8)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    probe = connect()
    samples = []
    until = time.monotonic() + 4
    while time.monotonic() < until:
        t0 = time.monotonic()
        request(probe, "GET", "/")
        samples.append((time.monotonic() - t0) * 1000)
        time.sleep(0.02)
    stop.set()
    for t in threads:
        t.join()
    samples.sort()
    p = lambda q: samples[min(len(samples) - 1, int(len(samples) * q))]
    print(f"GET / under 8 heavy clients: {len(samples)} probes, p50 {p(0.5):.2f} ms, "
          f"p99 {p(0.99):.2f} ms, max {samples[-1]:.2f} ms; {done[0]} heavy requests done")
    request(c, "DELETE", "/bench_hostile")


if __name__ == "__main__":
    main()
