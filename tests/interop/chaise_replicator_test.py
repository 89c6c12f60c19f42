#!/usr/bin/env python3
"""Chaise's replicator against CouchDB 3.5: Chaise pulls a CouchDB database (attachments,
several revisions, conflicts, deletions) and pushes it back to a new CouchDB database, one-shot
and continuous through a _replicator document; each copy is compared document by document
(every leaf, its body, its history, its attachment bytes) with the original.

Needs a CouchDB reachable at $COUCHDB_URL (as couchdb_replication_test.py, whose helpers it uses);
without one it says "skipped" and exits 77. Chaise is started from $CHAISE_BINARY on a free
loopback port and stopped by pid. Bounded: every wait has a deadline.
"""
import os
import random
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from couchdb_replication_test import (COUCH, N_DOCS, SKIPPED, Chaise,  # noqa: E402
                                      chaise_replicate, compare, couch_absent, fill_source,
                                      request, rj, snapshot, wait_for)

DEADLINE_S = 300


def main():
    absent = couch_absent()
    if absent is not None:
        why, is_skip = absent
        print(("skipped: " if is_skip else "FAIL: ") + why)
        return SKIPPED if is_skip else 1
    rng = random.Random(11)
    chaise = Chaise()
    ok = True
    tag = f"chaise_repl_{os.getpid()}"
    couch_dbs = [f"{tag}_src", f"{tag}_back", f"{tag}_cont"]
    try:
        src = f"{COUCH}/{couch_dbs[0]}"
        t0 = time.time()
        fill_source(src, rng)
        print(f"CouchDB source filled: {N_DOCS} docs in {time.time() - t0:.1f}s")
        s_src = snapshot(src)

        # Pull: CouchDB -> Chaise, run by Chaise.
        t0 = time.time()
        res = chaise_replicate(chaise, {"source": src, "target": "pulled", "create_target": True})
        h = res["history"][0]
        print(f"Chaise pulls from CouchDB: {time.time() - t0:.1f}s, docs_written "
              f"{h['docs_written']}, failures {h['doc_write_failures']}")
        ok &= h["doc_write_failures"] == 0
        ok &= compare(s_src, snapshot(chaise.url + "/pulled"), "CouchDB source vs Chaise's pull")

        # Nothing new: the checkpoints on both sides say so.
        res = chaise_replicate(chaise, {"source": src, "target": "pulled", "create_target": True})
        ok &= res.get("no_changes") is True
        if not res.get("no_changes"):
            print(f"FAIL: a second pull did not find its checkpoint: {res}")

        # Push: Chaise -> a new CouchDB database, run by Chaise.
        t0 = time.time()
        res = chaise_replicate(chaise, {"source": "pulled", "target": f"{COUCH}/{couch_dbs[1]}",
                                        "create_target": True})
        h = res["history"][0]
        print(f"Chaise pushes to CouchDB: {time.time() - t0:.1f}s, docs_written "
              f"{h['docs_written']}, failures {h['doc_write_failures']}")
        ok &= h["doc_write_failures"] == 0
        ok &= compare(s_src, snapshot(f"{COUCH}/{couch_dbs[1]}"), "CouchDB source vs Chaise's push")

        # Continuous, from a _replicator document on Chaise: a live change reaches CouchDB.
        rj("PUT", chaise.url + "/_replicator")
        status, res = rj("PUT", chaise.url + "/_replicator/live",
                         {"source": chaise.url + "/pulled", "target": f"{COUCH}/{couch_dbs[2]}",
                          "create_target": True, "continuous": True})
        assert status == 201, res
        ok &= wait_for(lambda: rj("GET", f"{COUCH}/{couch_dbs[2]}/doc00001")[0] == 200,
                       "the continuous job to copy an existing document", 120)
        status, res = rj("PUT", chaise.url + "/pulled/live1", {"v": 1, "_attachments": {
            "a.bin": {"content_type": "application/octet-stream", "data": "bGl2ZSBieXRlcw=="}}})
        assert status == 201, res
        ok &= wait_for(lambda: request("GET", f"{COUCH}/{couch_dbs[2]}/live1/a.bin")
                       == (200, b"live bytes"), "a live change to reach CouchDB")
        status, jobs = rj("GET", chaise.url + "/_scheduler/jobs")
        ok &= status == 200 and jobs["total_rows"] == 1 and jobs["jobs"][0]["doc_id"] == "live"
        status, doc = rj("GET", chaise.url + "/_replicator/live")
        rj("DELETE", chaise.url + f"/_replicator/live?rev={doc['_rev']}")
        ok &= wait_for(lambda: rj("GET", chaise.url + "/_scheduler/jobs")[1]["total_rows"] == 0,
                       "the job to stop once its document is deleted", 20)
    except AssertionError as e:
        print(f"FAIL: {e}")
        ok = False
    finally:
        chaise.stop()
        for db in couch_dbs:
            rj("DELETE", f"{COUCH}/{db}")
    print("PASS" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    signal.alarm(DEADLINE_S)
    sys.exit(main())
