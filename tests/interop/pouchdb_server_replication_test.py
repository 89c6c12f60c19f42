#!/usr/bin/env python3
"""Chaise's replicator against pouchdb-server (npm, in memory): Chaise pulls a pouchdb-server
database (attachments, several revisions, conflicts, deletions), pushes it to a new one, and
follows it continuously through a _replicator document; every copy is compared document by
document (every leaf, its body, its history, its attachment bytes) with the original.

Run through run_clients_test.sh, which installs the npm packages: pouchdb_server.mjs starts
pouchdb-server on an OS-assigned loopback port; Chaise comes from $CHAISE_BINARY. Both are stopped
by pid. Bounded: every wait has a deadline.
"""
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("INTEROP_DOCS", "1000")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from couchdb_replication_test import (N_DOCS, Chaise, chaise_replicate,  # noqa: E402
                                      compare, fill_source, request, rj, snapshot, wait_for)

DEADLINE_S = 280


class PouchDBServer:
    def __init__(self):
        self.dir = tempfile.TemporaryDirectory(prefix="chaise-pouchdb-server-")
        here = os.path.dirname(os.path.abspath(__file__))
        self.proc = subprocess.Popen(["node", os.path.join(here, "pouchdb_server.mjs"),
                                      self.dir.name], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.stop()
            raise RuntimeError(f"pouchdb-server did not start: {line!r}")
        self.url = f"http://127.0.0.1:{int(line.split()[-1])}"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.dir.cleanup()


def main():
    rng = random.Random(5)
    ps = PouchDBServer()
    chaise = Chaise()
    ok = True
    try:
        src = ps.url + "/src"
        t0 = time.time()
        fill_source(src, rng)
        print(f"pouchdb-server source filled: {N_DOCS} docs in {time.time() - t0:.1f}s")
        s_src = snapshot(src)

        t0 = time.time()
        res = chaise_replicate(chaise, {"source": src, "target": "pulled", "create_target": True})
        h = res["history"][0]
        print(f"Chaise pulls from pouchdb-server: {time.time() - t0:.1f}s, docs_written "
              f"{h['docs_written']}, failures {h['doc_write_failures']}")
        ok &= h["doc_write_failures"] == 0
        ok &= compare(s_src, snapshot(chaise.url + "/pulled"), "pouchdb-server vs Chaise's pull")
        res = chaise_replicate(chaise, {"source": src, "target": "pulled", "create_target": True})
        if res.get("no_changes") is not True:
            print(f"FAIL: a second pull did not find its checkpoint: {res}")
            ok = False

        t0 = time.time()
        res = chaise_replicate(chaise, {"source": "pulled", "target": ps.url + "/back",
                                        "create_target": True})
        h = res["history"][0]
        print(f"Chaise pushes to pouchdb-server: {time.time() - t0:.1f}s, docs_written "
              f"{h['docs_written']}, failures {h['doc_write_failures']}")
        ok &= h["doc_write_failures"] == 0
        ok &= compare(s_src, snapshot(ps.url + "/back"), "pouchdb-server vs Chaise's push")

        rj("PUT", chaise.url + "/_replicator")
        status, res = rj("PUT", chaise.url + "/_replicator/follow",
                         {"source": src, "target": chaise.url + "/live", "create_target": True,
                          "continuous": True})
        assert status == 201, res
        ok &= wait_for(lambda: rj("GET", chaise.url + "/live/doc00001")[0] == 200,
                       "the continuous job to copy an existing document", 60)
        status, res = rj("PUT", src + "/later", {"v": 1, "_attachments": {
            "a.bin": {"content_type": "application/octet-stream", "data": "bGl2ZSBieXRlcw=="}}})
        assert status == 201, res
        ok &= wait_for(lambda: request("GET", chaise.url + "/live/later/a.bin")
                       == (200, b"live bytes"), "a live change on pouchdb-server to reach Chaise")
        status, doc = rj("GET", chaise.url + "/_replicator/follow")
        rj("DELETE", chaise.url + f"/_replicator/follow?rev={doc['_rev']}")
    except AssertionError as e:
        print(f"FAIL: {e}")
        ok = False
    finally:
        chaise.stop()
        ps.stop()
    print("PASS" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    signal.alarm(DEADLINE_S)
    sys.exit(main())
