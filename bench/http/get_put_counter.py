#!/usr/bin/env python3
"""CouchDB-style updates of one counter document: each client GETs it, adds 1 and PUTs it back,
retrying on 409. Prints acknowledged updates/s, attempts answered 409, and the final counter.

  get_put_counter.py URL DB DOC CLIENTS SECONDS      (BENCH_AUTH_HEADER: an Authorization value)
"""
import http.client, json, os, sys, threading, time, urllib.parse

url, db, doc, clients, seconds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
u = urllib.parse.urlparse(url)
headers = {"Content-Type": "application/json"}
if os.environ.get("BENCH_AUTH_HEADER"):
    headers["Authorization"] = os.environ["BENCH_AUTH_HEADER"]
path = "/%s/%s" % (db, urllib.parse.quote(doc, safe=""))
ok = [0] * clients
conflicts = [0] * clients
latencies = [[] for _ in range(clients)]
deadline = time.monotonic() + seconds

def run(i):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    while time.monotonic() < deadline:
        t0 = time.monotonic()
        while True:
            c.request("GET", path, headers=headers)
            d = json.loads(c.getresponse().read())
            d["n"] += 1
            c.request("PUT", path, body=json.dumps(d), headers=headers)
            r = c.getresponse()
            r.read()
            if r.status in (200, 201):
                ok[i] += 1
                latencies[i].append(time.monotonic() - t0)
                break
            if r.status != 409:
                raise SystemExit("PUT answered %d" % r.status)
            conflicts[i] += 1
            if time.monotonic() >= deadline:
                break

threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
t0 = time.monotonic()
for t in threads: t.start()
for t in threads: t.join()
elapsed = time.monotonic() - t0
c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
c.request("GET", path, headers=headers)
final = json.loads(c.getresponse().read())["n"]
lat = sorted(x for l in latencies for x in l)
p99 = lat[int(len(lat) * 0.99)] * 1000 if lat else float("nan")
attempts = sum(ok) + sum(conflicts)
print("GET+PUT, %d clients: %.0f updates/s, %.0f%% of %d attempts answered 409, p99 %.1f ms, "
      "%d acknowledged, counter %d" % (clients, sum(ok) / elapsed,
      100.0 * sum(conflicts) / max(1, attempts), attempts, p99, sum(ok), final))
