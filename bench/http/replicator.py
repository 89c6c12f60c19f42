#!/usr/bin/env python3
"""The same replication run by CouchDB 3.5's replicator and by Chaise's, side by side: a pull of
DOCS small documents from a CouchDB database into a Chaise database, and of ATT_DOCS documents
with one ATT_BYTES attachment each. Reports the wall time of POST /_replicate (one-shot, answered
when done) and docs/s, and the Chaise process's peak RSS while its replicator runs.

  BENCH_AUTH=admin:admin bench/http/replicator.py COUCH_URL CHAISE_URL [CHAISE_PID]

COUCH_URL and CHAISE_URL are base URLs without credentials (BENCH_AUTH is sent to both and put
into the replication's endpoint URLs). Environment: DOCS (100000), ATT_DOCS (1000), ATT_BYTES
(1048576), WORKLOADS ("docs atts"). The source is seeded once per workload on CouchDB; each run
writes to a fresh Chaise database; every database is deleted at the end. Each run is checked:
the target holds every document.
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client import Client  # noqa: E402

DOCS = int(os.environ.get("DOCS", "100000"))
ATT_DOCS = int(os.environ.get("ATT_DOCS", "1000"))
ATT_BYTES = int(os.environ.get("ATT_BYTES", str(1 << 20)))
WORKLOADS = os.environ.get("WORKLOADS", "docs atts").split()


def with_auth(url):
    auth = os.environ.get("BENCH_AUTH")
    if not auth:
        return url
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{auth}@{rest}"


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


class PeakRss:
    def __init__(self, pid):
        self.pid, self.peak, self.stop = pid, 0, False
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop:
            self.peak = max(self.peak, rss_kib(self.pid))
            time.sleep(0.05)

    def __enter__(self):
        if self.pid:
            self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop = True
        if self.pid:
            self.thread.join()


def seed_docs(couch, db):
    couch.raw("PUT", "/" + db)
    for k in range(0, DOCS, 2000):
        docs = [{"_id": f"d{i:07d}", "n": i, "s": "x" * 40} for i in range(k, min(DOCS, k + 2000))]
        couch.req("POST", f"/{db}/_bulk_docs", {"docs": docs})


def seed_atts(couch, db):
    import base64
    couch.raw("PUT", "/" + db)
    blob = base64.b64encode(os.urandom(ATT_BYTES)).decode()
    for k in range(0, ATT_DOCS, 20):
        docs = [{"_id": f"a{i:05d}", "_attachments": {"blob.bin": {
            "content_type": "application/octet-stream", "data": blob}}}
            for i in range(k, min(ATT_DOCS, k + 20))]
        couch.req("POST", f"/{db}/_bulk_docs", {"docs": docs})


def run(runner, name, source_url, target_url, chaise, target_db, expected, pid):
    chaise.raw("DELETE", "/" + target_db) if target_db in chaise.req("GET", "/_all_dbs") else None
    body = {"source": source_url, "target": target_url, "create_target": True}
    with PeakRss(pid) as rss:
        t0 = time.time()
        res = runner.req("POST", "/_replicate", body)
        took = time.time() - t0
    info = chaise.req("GET", "/" + target_db)
    ok = res.get("ok") and info["doc_count"] == expected
    peak = f", Chaise peak RSS {rss.peak / 1024:.0f} MiB" if pid else ""
    print(f"{name}: {took:.2f} s, {expected / took:,.0f} docs/s{peak}"
          f"{'' if ok else ' FAILED: ' + str(info['doc_count']) + ' docs'}")
    chaise.raw("DELETE", "/" + target_db)
    return took


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    couch_url, chaise_url = sys.argv[1].rstrip("/"), sys.argv[2].rstrip("/")
    pid = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    couch, chaise = Client(couch_url), Client(chaise_url)
    for workload in WORKLOADS:
        src = f"bench_replicator_{workload}"
        if src in couch.req("GET", "/_all_dbs"):
            couch.raw("DELETE", "/" + src)
        t0 = time.time()
        if workload == "docs":
            seed_docs(couch, src)
            n = DOCS
        else:
            seed_atts(couch, src)
            n = ATT_DOCS
        print(f"{workload}: {n} documents seeded on CouchDB in {time.time() - t0:.1f} s")
        source = with_auth(f"{couch_url}/{src}")
        for runner_name, runner in (("CouchDB's replicator", couch), ("Chaise's replicator", chaise)):
            target_db = f"bench_replicator_{workload}_copy"
            run(runner, f"  {runner_name}, CouchDB -> Chaise", source,
                with_auth(f"{chaise_url}/{target_db}"), chaise, target_db, n,
                pid)
        couch.raw("DELETE", "/" + src)
    return 0


if __name__ == "__main__":
    sys.exit(main())
