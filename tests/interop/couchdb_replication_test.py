#!/usr/bin/env python3
"""CouchDB 3.5's own replicator against Chaise: Chaise -> CouchDB -> Chaise, one-shot and
continuous, with attachments, several revisions, conflicts and deletions; at the end both sides
must hold the same documents, revisions, conflicts and attachment bytes.

Needs a CouchDB reachable at $COUCHDB_URL (default http://admin:admin@127.0.0.1:5990, as
../shared/ref/start-couchdb.sh starts it). Without one (nothing listens there) it says "skipped"
and exits 77, which CTest reports as a skip; a server there that is not CouchDB or refuses the
credentials is a failure.
Chaise is started from $CHAISE_BINARY on a free loopback port and stopped by pid.
Bounded: every wait has a deadline; the whole run takes about a minute.
"""
import base64
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

COUCH = os.environ.get("COUCHDB_URL", "http://admin:admin@127.0.0.1:5990").rstrip("/")
BINARY = os.environ.get("CHAISE_BINARY", os.path.join(os.path.dirname(__file__),
                                                      "../../build/server/chaise"))
N_DOCS = int(os.environ.get("INTEROP_DOCS", "5000"))
DEADLINE_S = 240


def request(method, url, body=None, headers=None, timeout=60):
    parsed = urllib.parse.urlsplit(url)
    hdrs = {"Accept": "application/json"}
    if parsed.username:
        cred = f"{urllib.parse.unquote(parsed.username)}:{urllib.parse.unquote(parsed.password or '')}"
        hdrs["Authorization"] = "Basic " + base64.b64encode(cred.encode()).decode()
        url = parsed._replace(netloc=parsed.hostname + (f":{parsed.port}" if parsed.port else "")).geturl()
    data = None
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        hdrs["Content-Type"] = "application/json"
    hdrs.update(headers or {})
    req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, raw
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def rj(method, url, body=None):
    status, raw = request(method, url, body)
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw


SKIPPED = 77  # CTest's SKIP_RETURN_CODE for this test


def couch_absent():
    """None when CouchDB answers at COUCH with these credentials; else why not, and whether that
    is an absence (a skip) or a failure."""
    try:
        status, body = rj("GET", COUCH + "/_session")
    except OSError as e:
        return f"no CouchDB at {COUCH} ({e})", True
    if status == 401:
        return f"CouchDB at {COUCH} refuses the credentials (401)", False
    name = body.get("userCtx", {}).get("name") if isinstance(body, dict) else None
    status_root, root = rj("GET", COUCH + "/")
    if status != 200 or status_root != 200 or not isinstance(root, dict) or \
            root.get("couchdb") != "Welcome" or name is None:
        return f"{COUCH} is not a CouchDB this test can log in to ({status} {body})", False
    return None


class Chaise:
    def __init__(self):
        self.dir = tempfile.TemporaryDirectory(prefix="chaise-interop-")
        # A server admin from the environment (as CouchDB's Docker image takes it); every request
        # and both replicators authenticate with Basic.
        env = dict(os.environ, COUCHDB_USER="interop_admin", COUCHDB_PASSWORD="interop-secret")
        self.proc = subprocess.Popen([BINARY, "--port", "0", "--data-dir", self.dir.name + "/data"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                     env=env)
        deadline = time.time() + 30
        self.port = None
        while time.time() < deadline and self.port is None:
            line = self.proc.stdout.readline()  # "chaise listening on <addr>:<port>"
            if not line:
                break
            if "listening on" in line:
                self.port = int(line.strip().rsplit(":", 1)[1])
        if self.port is None:
            self.stop()
            raise RuntimeError("chaise did not report its port")
        self.url = f"http://interop_admin:interop-secret@127.0.0.1:{self.port}"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.dir.cleanup()


def make_docs(n, rng):
    docs = []
    for i in range(n):
        d = {"_id": f"doc{i:05d}", "n": i, "text": "x" * rng.randint(0, 200), "nested": {"i": i}}
        if i % 20 == 0:
            blob = bytes(rng.getrandbits(8) for _ in range(rng.choice([10, 3000, 120_000])))
            d["_attachments"] = {
                "blob.bin": {"content_type": "application/octet-stream",
                             "data": base64.b64encode(blob).decode()},
                "note.txt": {"content_type": "text/plain",
                             "data": base64.b64encode(f"note {i}".encode()).decode()},
            }
        docs.append(d)
    return docs


def fill_source(base, rng):
    assert rj("PUT", base)[0] == 201
    docs = make_docs(N_DOCS, rng)
    revs = {}
    for k in range(0, len(docs), 250):
        status, res = rj("POST", base + "/_bulk_docs", {"docs": docs[k:k + 250]})
        assert status == 201, res
        for r in res:
            assert r.get("ok"), r
            revs[r["id"]] = r["rev"]
    # More revisions on a subset, keeping attachments as stubs.
    for i in range(0, N_DOCS, 7):
        did = f"doc{i:05d}"
        status, doc = rj("GET", f"{base}/{did}")
        doc["edited"] = True
        status, res = rj("PUT", f"{base}/{did}", doc)
        assert status == 201, res
        revs[did] = res["rev"]
    # Conflicts: a second branch from the first revision, written as a replicator would.
    for i in range(3, N_DOCS, 50):
        did = f"doc{i:05d}"
        status, doc = rj("GET", f"{base}/{did}?revs=true")
        start, ids = doc["_revisions"]["start"], doc["_revisions"]["ids"]
        branch = {"_id": did, "_rev": f"{start + 1}-{'c' * 32}", "conflict": True,
                  "_revisions": {"start": start + 1, "ids": ["c" * 32] + ids}}
        status, res = rj("POST", base + "/_bulk_docs", {"docs": [branch], "new_edits": False})
        assert status == 201 and res == [], res
    # Deletions.
    for i in range(5, N_DOCS, 100):
        did = f"doc{i:05d}"
        status, res = rj("DELETE", f"{base}/{did}?rev={revs[did]}")
        assert status == 200, res


def snapshot(base):
    """Every document as {id: {leaf rev: (deleted, body without _ members, {att: bytes})}}."""
    status, ch = rj("GET", base + "/_changes?style=all_docs")
    assert status == 200, ch
    out = {}
    for row in ch["results"]:
        did = row["id"]
        status, raw = request("GET", f"{base}/{urllib.parse.quote(did, safe='')}"
                              "?open_revs=all&attachments=true&revs=true",
                              headers={"Accept": "application/json"})
        assert status == 200, raw
        leaves = {}
        for entry in json.loads(raw):
            doc = entry["ok"]
            atts = {name: base64.b64decode(a["data"]) for name, a in
                    doc.get("_attachments", {}).items()}
            body = {k: v for k, v in doc.items() if not k.startswith("_")}
            leaves[doc["_rev"]] = (doc.get("_deleted", False), json.dumps(body, sort_keys=True),
                                   atts, tuple(doc["_revisions"]["ids"][:3]))
        out[did] = leaves
    return out


def compare(a, b, what):
    if a == b:
        print(f"ok: {what}: {len(a)} documents equal")
        return True
    missing = sorted(set(a) - set(b))[:5]
    extra = sorted(set(b) - set(a))[:5]
    diff = [k for k in a if k in b and a[k] != b[k]][:5]
    print(f"FAIL: {what}: missing {missing} extra {extra} differing {diff}")
    for k in diff[:2]:
        print("  left ", {r: v[:2] for r, v in a[k].items()})
        print("  right", {r: v[:2] for r, v in b[k].items()})
    return False


def replicate(source, target, continuous=False):
    body = {"source": source, "target": target, "create_target": True}
    status, res = rj("POST", COUCH + "/_replicate", body)
    if status not in (200, 201) or not res.get("ok"):
        raise AssertionError(f"replication {source} -> {target} failed: {status} {res}")
    return res


def chaise_replicate(chaise, body):
    """POST /_replicate on Chaise (its own replicator); the answer, or AssertionError."""
    status, res = rj("POST", chaise.url + "/_replicate", body)
    if status not in (200, 202) or not res.get("ok"):
        raise AssertionError(f"Chaise's replication {body} failed: {status} {res}")
    return res


def wait_for(pred, what, timeout_s=60):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.5)
    print(f"FAIL: timed out waiting for {what}")
    return False


def main():
    absent = couch_absent()
    if absent is not None:
        why, is_skip = absent
        print(("skipped: " if is_skip else "FAIL: ") + why)
        return SKIPPED if is_skip else 1
    rng = random.Random(7)
    chaise = Chaise()
    ok = True
    tag = f"interop_{os.getpid()}"
    couch_dbs = [f"{tag}_a", f"{tag}_cont"]
    try:
        src, back = f"{chaise.url}/src", f"{chaise.url}/back"
        t0 = time.time()
        fill_source(src, rng)
        print(f"source filled: {N_DOCS} docs in {time.time() - t0:.1f}s")

        t0 = time.time()
        res = replicate(src, f"{COUCH}/{couch_dbs[0]}")
        print(f"Chaise -> CouchDB one-shot: {time.time() - t0:.1f}s, docs_written "
              f"{res['history'][0]['docs_written']}, failures {res['history'][0]['doc_write_failures']}")
        ok &= res["history"][0]["doc_write_failures"] == 0
        s_src = snapshot(src)
        ok &= compare(s_src, snapshot(f"{COUCH}/{couch_dbs[0]}"), "Chaise source vs CouchDB copy")

        t0 = time.time()
        res = replicate(f"{COUCH}/{couch_dbs[0]}", back)
        print(f"CouchDB -> Chaise one-shot: {time.time() - t0:.1f}s, docs_written "
              f"{res['history'][0]['docs_written']}, failures {res['history'][0]['doc_write_failures']}")
        ok &= res["history"][0]["doc_write_failures"] == 0
        ok &= compare(s_src, snapshot(back), "Chaise source vs Chaise copy of CouchDB's copy")

        # A second one-shot run finds nothing to do (checkpoints on both sides work).
        res = replicate(src, f"{COUCH}/{couch_dbs[0]}")
        ok &= res.get("no_changes", False) or res["history"][0]["docs_written"] == 0

        # Continuous: a change on Chaise reaches CouchDB while the replication runs.
        rep_id = f"{tag}_job"
        status, res = rj("PUT", f"{COUCH}/_replicator/{rep_id}",
                         {"source": src, "target": f"{COUCH}/{couch_dbs[1]}",
                          "create_target": True, "continuous": True})
        assert status == 201, res
        ok &= wait_for(lambda: rj("GET", f"{COUCH}/{couch_dbs[1]}/doc00001")[0] == 200,
                       "continuous replication to copy an existing document", 120)
        payload = base64.b64encode(b"live bytes").decode()
        status, res = rj("PUT", f"{src}/live1", {"v": 1, "_attachments": {
            "a.bin": {"content_type": "application/octet-stream", "data": payload}}})
        assert status == 201, res
        ok &= wait_for(lambda: request("GET", f"{COUCH}/{couch_dbs[1]}/live1/a.bin")
                       == (200, b"live bytes"), "a live change to reach CouchDB")
        status, doc = rj("GET", f"{COUCH}/_replicator/{rep_id}")
        rj("DELETE", f"{COUCH}/_replicator/{rep_id}?rev={doc['_rev']}")
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
