#!/usr/bin/env python3
"""Fault injection on Chaise over FoundationDB: a three-process FoundationDB cluster ("double ssd",
three coordinators, so it outlives the loss of any one process) and three Chaise nodes on it (one
key prefix, so they serve the same databases) take writes from several client threads while, cycle
after cycle, one fdbserver process and then one Chaise node are killed with SIGKILL and restarted.

The writers create documents with unique ids and increment counters in a few shared "hot"
documents (read-modify-write, retried on 409), through the nodes in turn. Every write answered
201/202 is acknowledged and must survive; a write that got no answer or a 5xx may or may not have
landed (allowed). Each increment carries a token that it appends to the hot document's "ops" list,
so that the final state tells exactly which increments landed. Checked:
  - while a fault lasts, the surviving nodes keep acknowledging writes (with an fdbserver down:
    once FoundationDB has recovered without it, which the test waits for up to 40 s);
  - a restarted node (on a new port, which the writers learn) acknowledges writes again;
  - at the end, through every node: every acknowledged document reads back with its revision and
    body; each hot document's counter equals its acknowledged increments (plus any unanswered one
    that is found to have landed) and its ops list holds no token twice; GET /db doc_count is the
    same on every node and at least the acknowledged creates; _changes lists each id once.

Before those final checks, with the writers stopped, the whole cluster stops answering: every
fdbserver gets SIGSTOP. Checked, with a 30 s HTTP timeout so that a hang shows as one:
  - every node answers GET /_up 503 {"status":"nok"} within 5 s (it probes the store for 2 s),
    asked without credentials as a load balancer does, and asked as the admin;
  - as the admin (so are the rest): GET /_node/_local/_system answers 200 with
    storage.available false within 5 s;
  - a GET of an existing document and a PUT of a new one each answer 503 service_unavailable
    within 15 s (the nodes' transaction_timeout, 10 s, and a margin), not later, never hang;
  - so does GET /_session as a _users member (whose credentials are in the store): 503, not
    401, three times; after the outage the member is known again on every node (no lockout);
  - after SIGCONT, FoundationDB reports itself healthy within 60 s, and then within 60 s every
    node answers /_up 200 and acknowledges a new document (201/202);
  - the PUT answered 503 during the outage is looked up afterwards: either it never landed (404)
    or it did (200); both are allowed and the report says which. The final checks count it as an
    unanswered create and the documents acknowledged after the recovery as acknowledged ones.

Needs FoundationDB's cluster.sh (CHAISE_FDB_DIR, default ../shared/fdb beside the repository):
without it the test says SKIPPED loudly and exits 77. Chaise comes from $CHAISE_BINARY.
Knobs (environment): CHAISE_FDB_FAULT_PORT (first fdbserver port, default 4720; the next free
triple up to +9 is used when it is taken), CHAISE_FDB_FAULT_CYCLES (3), CHAISE_FDB_FAULT_WRITERS
(4), CHAISE_FDB_FAULT_FDB_DOWN_S (8), CHAISE_FDB_FAULT_NODE_DOWN_S (3),
CHAISE_FDB_FAULT_RETRY_DELAY_US (the nodes' future_version_retry_delay), CHAISE_FDB_FAULT_KEEP=1
keeps the temporary directory (logs, data) for a post-mortem.
Bounded: every HTTP call and every wait has a timeout, the whole run has a deadline (SIGALRM);
every process the test starts is stopped by pid in a finally block, the cluster with
cluster.sh stop (after SIGCONT to any fdbserver still stopped), and the temporary directory is
removed.
"""
import base64
import collections
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

from fdb_home import fdb_home_with

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FDB_DIR = os.environ.get("CHAISE_FDB_DIR") or os.path.join(os.path.dirname(REPO), "shared", "fdb")
CLUSTER_SH = os.path.join(FDB_DIR, "cluster.sh")
# cluster.sh runs the binaries of $FDB_HOME, else unpacks its tarball into /tmp/chaise-fdb-bin.
FDB_HOME = os.environ.get("FDB_HOME") or "/tmp/chaise-fdb-bin/foundationdb"
BINARY = os.environ.get("CHAISE_BINARY") or os.path.join(REPO, "build", "server", "chaise")

# FoundationDB's ratekeeper stops writes, and its data distribution places no data, on a disk with
# less than 5% free (MIN_AVAILABLE_SPACE_RATIO, of the space an unprivileged writer has), and the
# machines here run at 4-10% free. This cluster holds a few hundred MB: it keeps only the absolute
# floor (MIN_AVAILABLE_SPACE, 100 MB), so that how full the host's disk is does not decide the
# outcome. cluster.sh has no switch for it: the cluster runs from a FoundationDB home whose
# fdbserver adds it (fdb_home_with).
FDB_SERVER_ARGS = ["--knob_min_available_space_ratio", "0"]

BASE_PORT = int(os.environ.get("CHAISE_FDB_FAULT_PORT", "4720"))
CYCLES = int(os.environ.get("CHAISE_FDB_FAULT_CYCLES", "3"))
WRITERS = int(os.environ.get("CHAISE_FDB_FAULT_WRITERS", "4"))
# FoundationDB needs about 4 s here to notice the loss and recover (its transaction subsystem
# stalls meanwhile); 8 s leaves a few seconds of service with the process still missing. On a
# slower or busier machine its recovery takes longer: the process then stays down until every
# node has served a write, up to FDB_DOWN_MAX_S.
FDB_DOWN_S = float(os.environ.get("CHAISE_FDB_FAULT_FDB_DOWN_S", "8"))
FDB_DOWN_MAX_S = 40
NODE_DOWN_S = float(os.environ.get("CHAISE_FDB_FAULT_NODE_DOWN_S", "3"))
KEEP = os.environ.get("CHAISE_FDB_FAULT_KEEP") == "1"
# The nodes' [foundationdb] future_version_retry_delay in µs; unset, the server's default.
RETRY_DELAY_US = os.environ.get("CHAISE_FDB_FAULT_RETRY_DELAY_US")
DEADLINE_S = int(os.environ.get("CHAISE_FDB_FAULT_DEADLINE_S", "450"))

N_NODES = 3
N_FDB = 3
N_HOT = 3
HOT_FRACTION = 0.2      # share of the writers' operations that increment a hot document
WARMUP_S = 3            # load before the first fault
SETTLE_S = 2            # load between one fault's recovery and the next fault
HEALTHY_WAIT_S = 90     # longest wait for FoundationDB to report itself healthy after a restart
FIRST_ACK_WAIT_S = 20   # longest wait for a restarted node's first acknowledged write
HTTP_TIMEOUT_S = 20     # above the nodes' transaction_timeout (10 s)
OUTAGE_HTTP_TIMEOUT_S = 30  # with the cluster stopped: a request still unanswered by then hangs
UP_BOUND_S = 5          # /_up and _system probe the store for 2 s
REQUEST_BOUND_S = 15    # the nodes' transaction_timeout (10 s) and a margin
RECOVERY_WAIT_S = 60    # after SIGCONT: for FoundationDB's health, then for every node's service
DB = "fault"
USER, PASSWORD = "admin", "admin"
AUTH = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
# A _users member: its credentials live in the store, which the outage takes away.
MEMBER, MEMBER_PASSWORD = "outage-member", "member-secret"
MEMBER_AUTH = "Basic " + base64.b64encode(f"{MEMBER}:{MEMBER_PASSWORD}".encode()).decode()
SKIPPED = 77  # CTest's SKIP_RETURN_CODE for this test


class Deadline(Exception):
    """Raised in the main thread by SIGALRM (the run's deadline) or SIGTERM, so that the finally
    block still stops every process."""


def on_signal(signum, _frame):
    raise Deadline(f"signal {signal.Signals(signum).name}: the run is cut short")


def now():
    return time.monotonic()


class Client:
    """HTTP/1.1 to 127.0.0.1 with one kept-alive connection per port; every call has a timeout.
    One per thread (http.client connections are not thread-safe)."""

    def __init__(self, timeout=HTTP_TIMEOUT_S):
        self.timeout = timeout
        self.conns = {}

    def call(self, port, method, path, body=None, auth=True):
        """(status, JSON body, or text when it is not JSON); as the admin, with no credentials
        when auth is false, or with auth as the Authorization header when it is a string. Raises
        OSError or HTTPException when no answer arrives (refused, reset, timed out)."""
        conn = self.conns.pop(port, None) or http.client.HTTPConnection(
            "127.0.0.1", port, timeout=self.timeout)
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": auth if isinstance(auth, str) else AUTH} if auth else {}
        headers["Accept"] = "application/json"
        if data is not None:
            headers["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        except BaseException:
            conn.close()
            raise
        if resp.will_close:
            conn.close()
        else:
            self.conns[port] = conn
        try:
            return resp.status, (json.loads(raw) if raw else None)
        except ValueError:
            return resp.status, raw.decode(errors="replace")

    def call_retrying(self, port, method, path, body=None, tries=3):
        """For reads: a dropped kept-alive connection is retried on a fresh one."""
        for attempt in range(tries):
            try:
                return self.call(port, method, path, body)
            except (OSError, http.client.HTTPException):
                if attempt + 1 == tries:
                    raise
                time.sleep(0.2)

    def close(self):
        for conn in self.conns.values():
            conn.close()
        self.conns.clear()


class Node:
    """One Chaise process on the cluster: its own data directory and ini, the shared key prefix.
    `port` is what clients use to reach it; it changes on every start (--port 0)."""

    def __init__(self, idx, root, cluster_file, library, prefix):
        self.idx = idx
        self.dir = os.path.join(root, f"node{idx}")
        os.makedirs(self.dir)
        self.data = os.path.join(self.dir, "data")
        self.ini = os.path.join(self.dir, "chaise.ini")
        self.log = os.path.join(self.dir, "chaise.log")  # stderr: spdlog, with the access log
        retry = f"future_version_retry_delay = {RETRY_DELAY_US}\n" if RETRY_DELAY_US else ""
        with open(self.ini, "w") as f:
            f.write("[chaise]\nstorage_engine = foundationdb\n"
                    f"[foundationdb]\ncluster_file = {cluster_file}\nlibrary = {library}\n"
                    f"key_prefix = {prefix}\ntransaction_timeout = 10000\n{retry}"
                    "[chttpd_auth]\niterations = 10\n"
                    f"[admins]\n{USER} = {PASSWORD}\n")
        self.proc = None
        self.port = None
        self.starts = 0

    def start(self, timeout=30):
        """Starts the process and returns once it prints its port."""
        out = os.path.join(self.dir, f"stdout.{self.starts}")
        self.starts += 1
        with open(out, "wb") as o, open(self.log, "ab") as e:
            e.write(f"==== test: start {self.starts} ====\n".encode())
            e.flush()
            self.proc = subprocess.Popen(
                [BINARY, "--port", "0", "--data-dir", self.data, "--config", self.ini],
                stdin=subprocess.DEVNULL, stdout=o, stderr=e)
        deadline = now() + timeout
        while True:
            with open(out, errors="replace") as o:
                m = re.search(r"chaise listening on \S+:(\d+)", o.read())
            if m:
                self.port = int(m.group(1))
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"chaise node {self.idx} exited with {self.proc.returncode} "
                                   f"before listening; log: {self.log}")
            if now() > deadline:
                raise RuntimeError(f"chaise node {self.idx} did not report its port in {timeout}s")
            time.sleep(0.05)

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def pid_alive(pid):
    """Whether pid runs (a zombie does not count)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class FdbServer:
    """One fdbserver process of the cluster: killed by pid, restarted with the command line
    cluster.sh gave it (read from /proc before the kill)."""

    def __init__(self, pid, cluster_dir):
        self.pid = pid
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            self.argv = [a.decode() for a in f.read().split(b"\0") if a]
        if not os.path.basename(self.argv[0]).startswith("fdbserver"):
            raise RuntimeError(f"pid {pid} is not an fdbserver: {self.argv}")
        self.port = int(self.argv[self.argv.index("-p") + 1].rsplit(":", 1)[1])
        self.log = os.path.join(cluster_dir, "logs", f"fdbserver.{self.port}.out")
        self.popen = None  # set once this test spawns it itself

    def kill9(self):
        os.kill(self.pid, signal.SIGKILL)
        if self.popen is not None:
            self.popen.wait(10)
        deadline = now() + 10
        while pid_alive(self.pid) and now() < deadline:
            time.sleep(0.05)

    def restart(self, pids_file):
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=out,
                                          stderr=subprocess.STDOUT)
        self.pid = self.popen.pid
        # cluster.sh stop kills the pids listed there: the new process is stopped with the others.
        with open(pids_file, "a") as f:
            f.write(f"{self.pid}\n")


def unpack_fdb(root):
    """Makes sure FDB_HOME holds FoundationDB's binaries: cluster.sh unpacks its tarball there
    before anything else, whatever it is asked (here the status of no cluster, in root)."""
    if not os.path.exists(os.path.join(FDB_HOME, "bin", "fdbserver")):
        subprocess.run(["bash", CLUSTER_SH, "status", os.path.join(root, "unpack")],
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=300)


def fdb_status(cluster_file):
    """FoundationDB's machine-readable status, or None when fdbcli gives none in time."""
    try:
        r = subprocess.run([os.path.join(FDB_HOME, "bin", "fdbcli"), "-C", cluster_file,
                            "--timeout", "5", "--exec", "status json"],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=15)
        return json.loads(r.stdout)
    except (subprocess.TimeoutExpired, ValueError, OSError):
        return None


def fdb_healthy(status):
    if not status:
        return False
    db = status.get("client", {}).get("database_status", {})
    processes = status.get("cluster", {}).get("processes", {})
    return bool(db.get("available") and db.get("healthy")) and len(processes) >= N_FDB


def fdb_digest(status):
    """One line of what FoundationDB says of itself: availability, recovery, what limits its
    transaction rate, data distribution, processes and its messages."""
    if not status:
        return "no status (fdbcli gave none in 5 s)"
    cluster = status.get("cluster", {})
    db = status.get("client", {}).get("database_status", {})
    parts = [f"available={db.get('available')}", f"healthy={db.get('healthy')}",
             f"recovery={cluster.get('recovery_state', {}).get('name')}",
             f"limited_by={cluster.get('qos', {}).get('performance_limited_by', {}).get('name')}",
             f"data={cluster.get('data', {}).get('state', {}).get('name')}",
             f"processes={len(cluster.get('processes', {}))}"]
    messages = [m.get("name", "?") for m in cluster.get("messages", [])]
    messages += [m.get("name", "?") for m in status.get("client", {}).get("messages", [])]
    if messages:
        parts.append("messages=" + ",".join(messages))
    return " ".join(parts)


def fdb_disk(path):
    """The disk under path as FoundationDB sees it (flow's getDiskBytes): bytes free to an
    unprivileged writer, and the total without the blocks reserved for root. Its ratekeeper
    throttles writes when the free part falls under 5% of that total or 100 MB."""
    s = os.statvfs(path)
    return s.f_bavail * s.f_frsize, (s.f_blocks - (s.f_bfree - s.f_bavail)) * s.f_frsize


def fdb_trace_warnings(cluster_dir, since_wall, limit=12):
    """The kinds of warning and error events (Severity 20 and up) FoundationDB's processes wrote
    to their trace logs since since_wall (time.time()), most frequent first: "count Severity
    Type" lines."""
    counts = collections.Counter()
    event = re.compile(r'<Event Severity="(\d+)" Time="([\d.]+)"[^>]* Type="([^"]+)"')
    logs = os.path.join(cluster_dir, "logs")
    for name in sorted(os.listdir(logs)) if os.path.isdir(logs) else []:
        if not name.startswith("trace.") or not name.endswith(".xml"):
            continue
        with open(os.path.join(logs, name), errors="replace") as f:
            for line in f:
                m = event.match(line)
                if m and int(m.group(1)) >= 20 and float(m.group(2)) >= since_wall:
                    counts[(m.group(1), m.group(3))] += 1
    return [f"{n} x Severity {sev} {kind}" for (sev, kind), n in counts.most_common(limit)]


class FdbTimeline(threading.Thread):
    """FoundationDB's status, asked every second by this thread and whenever the test asks it,
    kept each time it changes, so that a failed check shows what FoundationDB said of itself
    meanwhile. (An answer can come seconds late: while a process is missing, status waits for
    it.)"""

    def __init__(self, cluster_file, stop):
        super().__init__(name="fdb-status", daemon=True)
        self.cluster_file = cluster_file
        self.stop = stop
        self.lock = threading.Lock()
        self.entries = []  # (time asked, digest)

    def poll(self):
        asked = now()
        status = fdb_status(self.cluster_file)
        digest = fdb_digest(status)
        with self.lock:
            if not self.entries or self.entries[-1][1] != digest:
                self.entries.append((asked, digest))
        return status

    def run(self):
        while not self.stop.wait(1.0):
            self.poll()

    def lines(self, t0, t1):
        """The digests in force during [t0, t1], timed from t0 by when they were asked for."""
        with self.lock:
            before = [e for e in self.entries if e[0] < t0][-1:]
            during = [e for e in self.entries if t0 <= e[0] <= t1]
        return [f"{max(t - t0, 0.0):+7.1f}s {d}" for t, d in before + during]


def wait_fdb_healthy(timeline, timeout):
    """Seconds until FoundationDB reports itself available, healthy and with every process; None
    when it does not within timeout."""
    t0 = now()
    while now() - t0 < timeout:
        if fdb_healthy(timeline.poll()):
            return now() - t0
        time.sleep(0.5)
    return None


def free_port_triple(base):
    """The first of base, base+3, base+6 whose three ports are free on 127.0.0.1."""
    for first in (base, base + 3, base + 6):
        try:
            for port in range(first, first + N_FDB):
                with socket.socket() as s:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do
                    s.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
    raise RuntimeError(f"no three free ports in {base}..{base + 8} (CHAISE_FDB_FAULT_PORT)")


class Ledger:
    """What the writers learned, shared under a lock: acknowledged and unanswered writes, every
    acknowledgement's time and node, failed requests."""

    def __init__(self):
        self.lock = threading.Lock()
        self.acked_creates = {}                 # id -> rev answered
        self.uncertain_creates = set()          # no answer / 5xx: may or may not exist
        self.acked_incs = collections.defaultdict(set)      # hot id -> tokens answered 201/202
        self.resolved_incs = collections.defaultdict(set)   # unanswered, later read back as landed
        self.uncertain_incs = collections.defaultdict(set)  # unanswered, never resolved
        self.acks = []                          # (time, node idx)
        self.slowest_ack = (0.0, None)          # (seconds, "METHOD path via node")
        self.failures = collections.Counter()   # (node idx, what) -> count
        self.failure_samples = []               # the first few, in full
        self.anomalies = []                     # Chaise answers that contradict its contract

    def ack(self, node, started, what):
        t = now()
        with self.lock:
            self.acks.append((t, node.idx))
            if t - started > self.slowest_ack[0]:
                self.slowest_ack = (t - started, f"{what} via node{node.idx}")

    def fail(self, node, method, path, status, detail):
        what = f"HTTP {status}" if status else type(detail).__name__
        with self.lock:
            self.failures[(node.idx, what)] += 1
            if len(self.failure_samples) < 12:
                self.failure_samples.append(
                    f"{time.strftime('%H:%M:%S')} {method} {path} via node{node.idx} "
                    f"(port {node.port}): {what} {str(detail)[:300]}")

    def anomaly(self, text):
        with self.lock:
            self.anomalies.append(text)
        print(f"ANOMALY: {text}", flush=True)

    def acks_between(self, t0, t1):
        """Acknowledgements in [t0, t1) per node idx."""
        with self.lock:
            counts = collections.Counter(n for t, n in self.acks if t0 <= t < t1)
        return counts

    def first_ack_via(self, idx, after):
        with self.lock:
            return next((t for t, n in self.acks if n == idx and t >= after), None)

    def longest_gap(self, t0, t1):
        """Longest stretch of [t0, t1] without an acknowledgement: (seconds, start)."""
        with self.lock:
            times = [t0] + [t for t, _ in self.acks if t0 <= t <= t1] + [t1]
        return max(((b - a, a) for a, b in zip(times, times[1:])), default=(0.0, t0))


class Writer(threading.Thread):
    """Writes through the nodes in turn until stopped. A node that fails a request (no answer or
    5xx) is left alone by this writer for a second, unless it comes back on a new port; the writer
    goes on with the next one."""

    def __init__(self, w, nodes, ledger, stop):
        super().__init__(name=f"writer{w}", daemon=True)
        self.w, self.nodes, self.ledger, self.stop = w, nodes, ledger, stop
        self.rng = random.Random(1000 + w)
        self.client = Client()
        self.avoid = {}  # node idx -> (port that failed, until when it is left alone)
        self.rr = w
        self.seq = 0     # next create's id number
        self.k = 0       # next increment's token number
        self.error = None

    def next_node(self):
        for _ in self.nodes:
            self.rr = (self.rr + 1) % len(self.nodes)
            node = self.nodes[self.rr]
            port, until = self.avoid.get(node.idx, (None, 0.0))
            if node.port is not None and (node.port != port or now() >= until):
                return node
        return None

    def send(self, method, path, body=None):
        """(node, status, body); status None with the exception as body when no answer came;
        (None, None, None) when no node is usable just now."""
        node = self.next_node()
        if node is None:
            time.sleep(0.05)
            return None, None, None
        port, started = node.port, now()
        try:
            status, res = self.client.call(port, method, path, body)
        except (OSError, http.client.HTTPException) as e:
            self.avoid[node.idx] = (port, now() + 1.0)
            self.ledger.fail(node, method, path, None, e)
            return node, None, e
        if status >= 500:
            self.avoid[node.idx] = (port, now() + 1.0)
            self.ledger.fail(node, method, path, status, res)
        elif status in (201, 202) and method != "GET":
            self.ledger.ack(node, started, f"{method} {path}")
        return node, status, res

    def create(self):
        doc_id = f"w{self.w}-{self.seq:06d}"
        node, status, res = self.send("PUT", f"/{DB}/{doc_id}",
                                      {"w": self.w, "seq": self.seq, "pad": "p" * 200})
        if node is None or isinstance(res, ConnectionRefusedError):
            return  # never reached a server: the same id is tried again
        self.seq += 1
        if status in (201, 202):
            if not isinstance(res, dict) or res.get("id") != doc_id or "rev" not in res:
                self.ledger.anomaly(f"PUT /{DB}/{doc_id} via node{node.idx}: {status} {res}")
            with self.ledger.lock:
                self.ledger.acked_creates[doc_id] = res.get("rev")
            return
        with self.ledger.lock:
            self.ledger.uncertain_creates.add(doc_id)
        if status is not None and status < 500:
            # A new id must not conflict: a 409 here means an earlier commit of this very
            # request landed (and the client was told it did not).
            self.ledger.anomaly(f"PUT /{DB}/{doc_id} (a new id) via node{node.idx}: "
                                f"{status} {res}")

    def increment(self):
        hot = f"hot-{self.rng.randrange(N_HOT)}"
        token = f"{self.w}.{self.k}"
        self.k += 1
        unanswered = False  # an attempt got no answer or a 5xx: it may have landed
        attempts = 0
        while not self.stop.is_set() and attempts < 100:
            attempts += 1
            node, status, doc = self.send("GET", f"/{DB}/{hot}")
            if status != 200:
                if status is not None and status < 500:
                    self.ledger.anomaly(f"GET /{DB}/{hot} via node{node.idx}: {status} {doc}")
                time.sleep(0.05)
                continue
            if token in doc["ops"]:
                with self.ledger.lock:
                    self.ledger.resolved_incs[hot].add(token)
                if not unanswered:
                    self.ledger.anomaly(f"increment {token} of {hot} was answered 409 only, "
                                        f"yet it landed")
                return
            node, status, res = self.send("PUT", f"/{DB}/{hot}", {
                "_rev": doc["_rev"], "counter": doc["counter"] + 1, "ops": doc["ops"] + [token]})
            if node is None or isinstance(res, ConnectionRefusedError):
                continue
            if status in (201, 202):
                with self.ledger.lock:
                    self.ledger.acked_incs[hot].add(token)
                return
            if status == 409:
                continue  # another writer's increment came first: read again
            unanswered = True
            if status is not None and status < 500:
                self.ledger.anomaly(f"PUT /{DB}/{hot} via node{node.idx}: {status} {res}")
        if unanswered:
            with self.ledger.lock:
                self.ledger.uncertain_incs[hot].add(token)

    def run(self):
        try:
            while not self.stop.is_set():
                if self.rng.random() < HOT_FRACTION:
                    self.increment()
                else:
                    self.create()
        except Exception as e:  # a bug in the test itself: reported by the main thread
            self.error = f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
        finally:
            self.client.close()


def setup_database(nodes):
    client = Client()
    status, res = client.call(nodes[0].port, "PUT", f"/{DB}")
    if status != 201:
        raise RuntimeError(f"PUT /{DB} via node0: {status} {res}")
    for node in nodes:
        deadline = now() + 10
        while client.call_retrying(node.port, "GET", f"/{DB}")[0] != 200:
            if now() > deadline:
                raise RuntimeError(f"node{node.idx} does not see /{DB} 10 s after its creation")
            time.sleep(0.2)
    for j in range(N_HOT):
        node = nodes[j % len(nodes)]
        status, res = client.call(node.port, "PUT", f"/{DB}/hot-{j}", {"counter": 0, "ops": []})
        if status != 201:
            raise RuntimeError(f"PUT /{DB}/hot-{j} via node{node.idx}: {status} {res}")
    client.close()


def fault_cycle(c, fdbs, nodes, ledger, cluster_file, timeline, pids_file, problems,
                reports):
    """One fdbserver kill and one Chaise node kill, each followed by recovery; what is measured
    goes to reports, for the summary."""
    rep = {"start": now()}
    reports.append(rep)

    # kill -9 one fdbserver; once FoundationDB has recovered without it, every node must serve
    # again while it is still down. The process stays down FDB_DOWN_S, longer (up to
    # FDB_DOWN_MAX_S) while FoundationDB's own recovery or a node's first write lags.
    fdb = fdbs[c % len(fdbs)]
    t_kill, wall_kill = now(), time.time()
    fdb.kill9()
    while now() - t_kill < FDB_DOWN_MAX_S:
        served = ledger.acks_between(t_kill, now())
        if now() - t_kill >= FDB_DOWN_S and all(served[n.idx] for n in nodes):
            break
        time.sleep(0.1)
    t_restart = now()
    fdb.restart(pids_file)
    healthy = wait_fdb_healthy(timeline, HEALTHY_WAIT_S)
    t_end = now()
    down = ledger.acks_between(t_kill, t_restart)
    gap, gap_start = ledger.longest_gap(t_kill, t_end)
    rep["fdb"] = dict(port=fdb.port, down=down, gap=gap, gap_at=gap_start - t_kill,
                      healthy=healthy, down_s=t_restart - t_kill)
    failed = len(problems)
    for node in nodes:
        if down[node.idx] == 0:
            problems.append(f"cycle {c + 1}: node{node.idx} acknowledged no write while "
                            f"fdbserver :{fdb.port} was down ({t_restart - t_kill:.1f}s)")
    if healthy is None:
        problems.append(f"cycle {c + 1}: FoundationDB not healthy {HEALTHY_WAIT_S}s after "
                        f"fdbserver :{fdb.port} restarted")
    if len(problems) > failed:
        print(f"cycle {c + 1}: FoundationDB's status from the kill of :{fdb.port} (restarted at "
              f"+{t_restart - t_kill:.1f}s):", flush=True)
        print("\n".join(f"   {ln}" for ln in timeline.lines(t_kill, t_end)), flush=True)
        print("  its warnings and errors since the kill:", flush=True)
        print("\n".join(f"   {ln}" for ln in fdb_trace_warnings(os.path.dirname(cluster_file),
                                                                wall_kill)), flush=True)
    if healthy is None:
        rep["end"] = now()
        raise RuntimeError(problems[-1])  # the next kill could take the cluster down: stop here
    time.sleep(SETTLE_S)

    # kill -9 one Chaise node; the other nodes must go on serving; restarted, it serves again.
    node = nodes[c % len(nodes)]
    old_port = node.port
    t_kill = now()
    node.kill9()
    time.sleep(NODE_DOWN_S)
    t_restart = now()
    node.start()
    t_up = now()
    first = None
    while now() - t_up < FIRST_ACK_WAIT_S:
        first = ledger.first_ack_via(node.idx, t_up)
        if first is not None:
            break
        time.sleep(0.05)
    t_end = now()
    down = ledger.acks_between(t_kill, t_up)
    gap, gap_start = ledger.longest_gap(t_kill, t_end)
    rep["node"] = dict(idx=node.idx, old_port=old_port, port=node.port, down=down, gap=gap,
                       gap_at=gap_start - t_kill, start_s=t_up - t_restart,
                       first_ack_s=None if first is None else first - t_up)
    for other in nodes:
        if other is not node and down[other.idx] == 0:
            problems.append(f"cycle {c + 1}: node{other.idx} acknowledged no write while "
                            f"node{node.idx} was down")
    if first is None:
        problems.append(f"cycle {c + 1}: node{node.idx} acknowledged no write within "
                        f"{FIRST_ACK_WAIT_S}s of its restart on port {node.port}")
    time.sleep(SETTLE_S)
    rep["end"] = now()


def outage_phase(fdbs, nodes, ledger, cluster_file, timeline, problems, stopped, rep):
    """The whole cluster stops answering (SIGSTOP on every fdbserver; `stopped` holds their pids
    until they run again, so that the clean-up can resume them): the nodes must answer at once
    that they are out of service, and requests with 503 within the transaction timeout. Then
    SIGCONT: the service must come back on every node. What is measured goes to rep as it is
    measured, for the summary (a run cut short still reports it)."""
    rep["checks"] = []
    client = Client(timeout=OUTAGE_HTTP_TIMEOUT_S)
    w = WRITERS  # this phase's documents are those of one writer more (verify parses the ids)
    seq = 0

    def new_doc():
        nonlocal seq
        doc_id = f"w{w}-{seq:06d}"
        body = {"w": w, "seq": seq, "pad": "outage"}
        seq += 1
        return doc_id, body

    def timed(port, method, path, body=None, auth=True):
        t0 = now()
        try:
            status, res = client.call(port, method, path, body, auth)
        except (OSError, http.client.HTTPException) as e:
            status, res = None, e
        return status, res, now() - t0

    def unavailable(res):
        return res.get("error") == "service_unavailable"

    def check(what, answer, want_status, bound, body_ok, member=None):
        """Records and prints one answer; `member` names the part of the body worth showing."""
        status, res, took = answer
        good = status == want_status and took <= bound and isinstance(res, dict) and body_ok(res)
        rep["checks"].append((what, status, took, good))
        shown = res.get(member, res) if member and isinstance(res, dict) else res
        print(f"  {what}: {status if status else type(res).__name__} in {took:.2f}s "
              f"{str(shown)[:200]}", flush=True)
        if not good:
            problems.append(f"outage: {what}: {status} in {took:.2f}s, expected {want_status} "
                            f"within {bound}s: {str(shown)[:300]}")

    node = nodes[0]
    member = {"_id": f"org.couchdb.user:{MEMBER}", "name": MEMBER, "password": MEMBER_PASSWORD,
              "roles": [], "type": "user"}
    status, res = client.call(node.port, "PUT", "/_users")
    if status in (201, 202, 412):  # 412: there already
        status, res = client.call(node.port, "PUT", f"/_users/org.couchdb.user:{MEMBER}", member)
    if status not in (201, 202):
        problems.append(f"outage: the _users member could not be created: {status} {res}")
        client.close()
        raise RuntimeError(problems[-1])
    check("GET /_session as a _users member before the outage",
          timed(node.port, "GET", "/_session", auth=MEMBER_AUTH), 200, REQUEST_BOUND_S,
          lambda r: r.get("userCtx", {}).get("name") == MEMBER)
    t_stop = now()
    for f in fdbs:
        stopped.append(f.pid)
        os.kill(f.pid, signal.SIGSTOP)
    print(f"outage: SIGSTOP to every fdbserver (pids {stopped})", flush=True)
    # /_up as a load balancer asks (no credentials) through every node, then as the admin.
    for n in nodes:
        check(f"GET /_up via node{n.idx}", timed(n.port, "GET", "/_up", auth=False), 503,
              UP_BOUND_S, lambda r: r.get("status") == "nok")
    check(f"GET /_up as admin via node{node.idx}", timed(node.port, "GET", "/_up"), 503,
          UP_BOUND_S, lambda r: r.get("status") == "nok")
    check(f"GET /_node/_local/_system via node{node.idx}",
          timed(node.port, "GET", "/_node/_local/_system"), 200, UP_BOUND_S,
          lambda r: isinstance(r.get("storage"), dict) and r["storage"].get("available") is False
          and r["storage"].get("engine") == "foundationdb", member="storage")
    check(f"GET /{DB}/hot-0 via node{node.idx}", timed(node.port, "GET", f"/{DB}/hot-0"), 503,
          REQUEST_BOUND_S, unavailable)
    # A member's credentials cannot be checked: 503, not 401 (nor a failure towards a lockout).
    for attempt in range(3):
        check(f"GET /_session as a _users member via node{node.idx} ({attempt + 1})",
              timed(node.port, "GET", "/_session", auth=MEMBER_AUTH), 503, REQUEST_BOUND_S,
              unavailable)
    lost_id, body = new_doc()
    with ledger.lock:
        ledger.uncertain_creates.add(lost_id)  # whatever the answer, it may or may not land
    check(f"PUT /{DB}/{lost_id} via node{node.idx}",
          timed(node.port, "PUT", f"/{DB}/{lost_id}", body), 503, REQUEST_BOUND_S, unavailable)

    t_cont = now()
    for pid in list(stopped):
        os.kill(pid, signal.SIGCONT)
    stopped.clear()
    rep["stopped_s"] = t_cont - t_stop
    healthy = wait_fdb_healthy(timeline, RECOVERY_WAIT_S)
    rep["healthy"] = healthy
    print(f"outage: SIGCONT after {t_cont - t_stop:.1f}s; FoundationDB healthy "
          f"{'never' if healthy is None else f'{healthy:.1f}s later'}", flush=True)
    if healthy is None:
        problems.append(f"outage: FoundationDB not healthy {RECOVERY_WAIT_S}s after SIGCONT")
        print("outage: FoundationDB's status from SIGCONT:", flush=True)
        print("\n".join(f"   {ln}" for ln in timeline.lines(t_cont, now())), flush=True)
        client.close()
        raise RuntimeError(problems[-1])

    # Every node: /_up 200, then a new document acknowledged; a failed attempt's document may
    # have landed, so each attempt writes a new id. Both waits share one deadline per node.
    rep["back"] = []
    for n in nodes:
        t0 = now()
        deadline = t0 + RECOVERY_WAIT_S
        up = None
        while now() < deadline:
            status, res, _ = timed(n.port, "GET", "/_up")
            if status == 200 and isinstance(res, dict) and res.get("status") == "ok":
                up = now() - t0
                break
            time.sleep(0.2)
        acked, tries, last = None, 0, None
        while up is not None and now() < deadline:
            tries += 1
            doc_id, body = new_doc()
            status, res, _ = timed(n.port, "PUT", f"/{DB}/{doc_id}", body)
            if status in (201, 202) and isinstance(res, dict) and "rev" in res:
                with ledger.lock:
                    ledger.acked_creates[doc_id] = res["rev"]
                acked = now() - t0
                break
            last = f"{status} {str(res)[:200]}"
            with ledger.lock:
                ledger.uncertain_creates.add(doc_id)
            if status is not None and status < 500:
                ledger.anomaly(f"PUT /{DB}/{doc_id} (a new id) via node{n.idx} after the "
                               f"outage: {status} {res}")
                break
            time.sleep(0.5)
        rep["back"].append((n.idx, up, acked, tries))
        print(f"  node{n.idx}: /_up 200 "
              f"{'never' if up is None else f'after {up:.2f}s'}, first acknowledged PUT "
              f"{'never' if acked is None else f'after {acked:.2f}s'} ({tries} tries)",
              flush=True)
        if up is None:
            problems.append(f"outage: node{n.idx} did not answer /_up 200 within "
                            f"{RECOVERY_WAIT_S}s of the cluster's recovery")
        elif acked is None:
            problems.append(f"outage: node{n.idx} acknowledged no PUT within "
                            f"{RECOVERY_WAIT_S}s of the cluster's recovery ({tries} tries, last "
                            f"{last})")

    # The member's refused requests counted towards no lockout: it reads again through every node.
    for n in nodes:
        check(f"GET /_session as the _users member via node{n.idx} after the outage",
              timed(n.port, "GET", "/_session", auth=MEMBER_AUTH), 200, REQUEST_BOUND_S,
              lambda r: r.get("userCtx", {}).get("name") == MEMBER)

    # The PUT answered 503: it cannot have committed while the cluster was stopped, but either
    # outcome keeps the store consistent; the report says which it was.
    status, res = client.call_retrying(node.port, "GET", f"/{DB}/{lost_id}")
    landed = {200: "landed", 404: "not there"}.get(status)
    rep["lost"] = (lost_id, landed or f"HTTP {status}")
    print(f"  the PUT of {lost_id} during the outage: {rep['lost'][1]}", flush=True)
    if landed is None:
        problems.append(f"outage: GET /{DB}/{lost_id} after the recovery: {status} "
                        f"{str(res)[:200]}")
    client.close()


def verify(nodes, ledger, problems):
    """The final checks, through every node; returns a few figures for the summary."""
    client = Client(timeout=60)
    acked = dict(ledger.acked_creates)
    uncertain = set(ledger.uncertain_creates)
    hot_ids = {f"hot-{j}" for j in range(N_HOT)}
    figures = {}

    # doc_count: the same on every node, between the acknowledged and the possible creates.
    counts = []
    for node in nodes:
        status, info = client.call_retrying(node.port, "GET", f"/{DB}")
        counts.append(info.get("doc_count") if status == 200 else f"HTTP {status}")
    figures["doc_count"] = counts
    lo, hi = len(acked) + N_HOT, len(acked) + len(uncertain) + N_HOT
    if len(set(counts)) != 1:
        problems.append(f"doc_count differs between nodes: {counts}")
    for node, count in zip(nodes, counts):
        if not isinstance(count, int) or not lo <= count <= hi:
            problems.append(f"node{node.idx}: doc_count {count}, expected {lo}..{hi} "
                            f"({len(acked)} acknowledged creates, {len(uncertain)} unanswered, "
                            f"{N_HOT} hot documents)")

    # _changes: each id once; every acknowledged id there; no id nobody wrote.
    for node in nodes:
        status, feed = client.call_retrying(node.port, "GET", f"/{DB}/_changes")
        if status != 200:
            problems.append(f"node{node.idx}: GET /{DB}/_changes: {status} {str(feed)[:200]}")
            continue
        ids = [row["id"] for row in feed["results"]]
        dup = [i for i, n in collections.Counter(ids).items() if n > 1]
        missing = [i for i in list(acked) + sorted(hot_ids) if i not in set(ids)]
        unknown = [i for i in ids if i not in acked and i not in uncertain and i not in hot_ids]
        if dup:
            problems.append(f"node{node.idx}: _changes lists {len(dup)} ids more than once, "
                            f"e.g. {dup[:5]}")
        if missing:
            problems.append(f"node{node.idx}: _changes misses {len(missing)} acknowledged ids, "
                            f"e.g. {missing[:5]}")
        if unknown:
            problems.append(f"node{node.idx}: _changes lists {len(unknown)} ids never written, "
                            f"e.g. {unknown[:5]}")

    # Every acknowledged document through every node, several readers at once.
    pairs = [(node, doc_id, rev) for node in nodes for doc_id, rev in acked.items()]
    bad = []
    bad_lock = threading.Lock()

    def read(part):
        reader = Client(timeout=30)
        try:
            for node, doc_id, rev in part:
                try:
                    status, doc = reader.call_retrying(node.port, "GET", f"/{DB}/{doc_id}")
                except (OSError, http.client.HTTPException) as e:
                    status, doc = None, e
                w, seq = (int(x) for x in doc_id[1:].split("-"))
                good = status == 200 and isinstance(doc, dict) and doc.get("_rev") == rev \
                    and doc.get("w") == w and doc.get("seq") == seq
                if not good:
                    with bad_lock:
                        bad.append(f"GET /{DB}/{doc_id} via node{node.idx}: {status} "
                                   f"{str(doc)[:150]} (acknowledged rev {rev})")
        finally:
            reader.close()

    t0 = now()
    readers = [threading.Thread(target=read, args=(pairs[r::4],), daemon=True) for r in range(4)]
    for r in readers:
        r.start()
    for r in readers:
        r.join(120)
    figures["reads"] = (len(pairs), now() - t0)
    if any(r.is_alive() for r in readers):
        problems.append("reading back the acknowledged documents took over 120 s")
    if bad:
        problems.append(f"{len(bad)} of {len(pairs)} reads of acknowledged documents failed, "
                        f"e.g.: " + "; ".join(bad[:5]))

    # Hot documents: the same revision on every node; the counter counts exactly the tokens, each
    # once; the acknowledged increments are all there, and nothing else but unanswered ones.
    figures["hot"] = []
    for hot in sorted(hot_ids):
        seen = []
        for node in nodes:
            status, doc = client.call_retrying(node.port, "GET", f"/{DB}/{hot}")
            if status != 200:
                problems.append(f"GET /{DB}/{hot} via node{node.idx}: {status} {doc}")
                continue
            seen.append((doc["_rev"], doc["counter"], tuple(doc["ops"])))
        if not seen:
            continue
        if len(set(seen)) != 1:
            problems.append(f"{hot}: the nodes disagree: " +
                            ", ".join(f"rev {r} counter {n}" for r, n, _ in seen))
        _, counter, ops = seen[0]
        acked_tokens = ledger.acked_incs[hot]
        resolved = ledger.resolved_incs[hot]
        unresolved = ledger.uncertain_incs[hot]
        landed_unanswered = set(ops) & unresolved
        expected = len(acked_tokens) + len(resolved) + len(landed_unanswered)
        figures["hot"].append((hot, counter, len(acked_tokens), len(resolved),
                               len(landed_unanswered), len(unresolved)))
        dup = [t for t, n in collections.Counter(ops).items() if n > 1]
        if dup:
            problems.append(f"{hot}: increments applied twice: {dup[:5]}")
        if counter != len(ops):
            problems.append(f"{hot}: counter {counter} but {len(ops)} increments recorded")
        lost = acked_tokens - set(ops)
        if lost:
            problems.append(f"{hot}: {len(lost)} acknowledged increments lost, "
                            f"e.g. {sorted(lost)[:5]}")
        stray = set(ops) - acked_tokens - resolved - unresolved
        if stray:
            problems.append(f"{hot}: increments nobody sent: {sorted(stray)[:5]}")
        if counter != expected:
            problems.append(f"{hot}: counter {counter}, expected {expected} "
                            f"({len(acked_tokens)} acknowledged, {len(resolved)} unanswered but "
                            f"read back, {len(landed_unanswered)} unanswered and landed)")
    client.close()
    return figures


def log_excerpt(node, limit=15):
    """The warning, error and critical lines of a node's log (the access log is at info)."""
    try:
        with open(node.log, errors="replace") as f:
            lines = [ln.rstrip() for ln in f
                     if re.search(r"\[(warning|error|critical)\]|==== test", ln)]
    except OSError:
        return []
    return lines[-limit:] if len(lines) > limit else lines


def print_summary(reports, ledger, figures, t_faults, t_stop, writers_n, outage):
    print("\n== summary ==")
    print(f"{N_FDB} fdbserver processes (double ssd), {N_NODES} chaise nodes, {writers_n} "
          f"writers, {len(reports)} fault cycles")
    for c, rep in enumerate(reports):
        if "fdb" not in rep:
            continue  # cut short before its first fault was measured
        rep.setdefault("end", t_stop)
        acks = sum(ledger.acks_between(rep["start"], rep["end"]).values())
        print(f"cycle {c + 1}: {acks} writes acknowledged in {rep['end'] - rep['start']:.1f}s")
        f = rep["fdb"]
        per = ", ".join(f"node{i} {f['down'][i]}" for i in range(N_NODES))
        healthy = "never" if f["healthy"] is None else f"{f['healthy']:.1f}s after its restart"
        print(f"  kill -9 fdbserver :{f['port']}, down {f['down_s']:.1f}s: "
              f"{sum(f['down'].values())} acks while down ({per}); no ack for {f['gap']:.2f}s "
              f"from +{f['gap_at']:.1f}s (writes flowing again "
              f"+{f['gap_at'] + f['gap']:.1f}s after the kill); cluster healthy {healthy}")
        if "node" in rep:
            n = rep["node"]
            per = ", ".join(f"node{i} {n['down'][i]}" for i in range(N_NODES) if i != n["idx"])
            first = "none" if n["first_ack_s"] is None else f"{n['first_ack_s']:.2f}s later"
            print(f"  kill -9 chaise node{n['idx']} (port {n['old_port']}): "
                  f"{sum(n['down'].values())} acks while down ({per}); restarted in "
                  f"{n['start_s']:.1f}s on port {n['port']}, first ack through it {first}; "
                  f"longest ack gap {n['gap']:.2f}s (from +{n['gap_at']:.1f}s after the kill)")
    gap, at = ledger.longest_gap(t_faults, t_stop)
    total = sum(ledger.acks_between(t_faults, t_stop).values())
    print(f"longest gap without an acknowledged write: {gap:.2f}s (at +{at - t_faults:.1f}s of "
          f"{t_stop - t_faults:.1f}s under faults, {total} acks, "
          f"{total / max(t_stop - t_faults, 1e-9):.0f}/s)")
    print(f"slowest acknowledged write: {ledger.slowest_ack[0]:.2f}s ({ledger.slowest_ack[1]})")
    incs = sum(len(s) for s in ledger.acked_incs.values())
    print(f"acknowledged: {len(ledger.acked_creates)} creates, {incs} increments; unanswered: "
          f"{len(ledger.uncertain_creates)} creates, "
          f"{sum(len(s) for s in ledger.uncertain_incs.values())} increments unresolved, "
          f"{sum(len(s) for s in ledger.resolved_incs.values())} read back as landed")
    if ledger.failures:
        print("failed requests: " + ", ".join(
            f"node{i} {what} x{n}" for (i, what), n in sorted(ledger.failures.items())))
    for s in ledger.failure_samples:
        print(f"  {s}")
    if outage.get("checks"):
        stopped = f"{outage['stopped_s']:.1f}s" if "stopped_s" in outage else "until the end"
        print(f"every fdbserver stopped for {stopped}: " + ", ".join(
            f"{what} {status} in {took:.2f}s{'' if good else ' (WRONG)'}"
            for what, status, took, good in outage["checks"]))
    if "healthy" in outage:
        healthy = outage["healthy"]
        print(f"  after SIGCONT: cluster healthy "
              f"{'never' if healthy is None else f'in {healthy:.1f}s'}" + "".join(
                  f"; node{i} /_up 200 {'never' if up is None else f'+{up:.2f}s'}, "
                  f"PUT 201 {'never' if acked is None else f'+{acked:.2f}s'} ({tries} tries)"
                  for i, up, acked, tries in outage.get("back", [])))
    if "lost" in outage:
        print(f"  the PUT answered during the outage ({outage['lost'][0]}): "
              f"{outage['lost'][1]} afterwards")
    if figures:
        print(f"doc_count per node: {figures['doc_count']}")
        if "reads" in figures:
            print(f"read back {figures['reads'][0]} documents (every node) in "
                  f"{figures['reads'][1]:.1f}s")
        for hot, counter, acked, resolved, landed, unresolved in figures.get("hot", []):
            print(f"{hot}: counter {counter} = {acked} acknowledged + {resolved} read back + "
                  f"{landed} unanswered-and-landed ({unresolved} unanswered in all)")


def main():
    if not os.path.isfile(CLUSTER_SH):
        banner = (f"*** fdb_fault_test: SKIPPED: no FoundationDB cluster script at {CLUSTER_SH} "
                  f"(set CHAISE_FDB_DIR to the folder holding cluster.sh) ***")
        print(banner, flush=True)
        print(banner, file=sys.stderr, flush=True)
        return SKIPPED
    if not os.access(BINARY, os.X_OK):
        print(f"FAIL: no chaise binary at {BINARY} (set CHAISE_BINARY)")
        return 1
    signal.signal(signal.SIGALRM, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    signal.alarm(DEADLINE_S)

    root = tempfile.mkdtemp(prefix="chaise-fdb-fault-")
    cluster_dir = os.path.join(root, "fdb")
    cluster_file = os.path.join(cluster_dir, "fdb.cluster")
    pids_file = os.path.join(cluster_dir, "pids")
    cluster_started = False
    nodes, fdbs, writers = [], [], []
    stop = threading.Event()          # the writers'
    status_stop = threading.Event()   # the status thread's
    ledger = Ledger()
    problems, reports, figures, outage = [], [], {}, {}
    timeline = None
    stopped_fdbs = []  # fdbserver pids under SIGSTOP, resumed before anything else is stopped
    t_faults = t_stop = None
    t_begin = now()
    try:
        port = free_port_triple(BASE_PORT)
        unpack_fdb(root)
        env = dict(os.environ, FDB_PROCS=str(N_FDB), FDB_MODE="double ssd", FDB_PORT=str(port),
                   FDB_MEMORY="1GiB", FDB_HOME=fdb_home_with(root, FDB_HOME, FDB_SERVER_ARGS))
        cluster_started = True  # from here on, cluster.sh stop runs in the finally block
        r = subprocess.run(["bash", CLUSTER_SH, "start", cluster_dir], env=env,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=150)
        if r.returncode != 0:
            raise RuntimeError(f"cluster.sh start failed ({r.returncode}): {r.stdout}{r.stderr}")
        with open(pids_file) as f:
            fdbs = [FdbServer(int(p), cluster_dir) for p in f.read().split()]
        timeline = FdbTimeline(cluster_file, status_stop)
        timeline.start()
        library = os.path.join(FDB_HOME, "lib", "libfdb_c.so")
        free, total = fdb_disk(cluster_dir)
        print(f"FoundationDB up on ports {port}-{port + N_FDB - 1} in "
              f"{now() - t_begin:.1f}s (pids {[f.pid for f in fdbs]}); its disk: "
              f"{free / 1e9:.1f} GB free of {total / 1e9:.1f} GB ({100 * free / total:.1f}%; "
              f"{' '.join(FDB_SERVER_ARGS)})", flush=True)

        prefix = f"fault-test/{os.getpid()}-{int(time.time())}/"
        for i in range(N_NODES):
            node = Node(i, root, cluster_file, library, prefix)
            nodes.append(node)
            node.start()
        setup_database(nodes)
        print(f"chaise nodes on ports {[n.port for n in nodes]}, /{DB} created, "
              f"{now() - t_begin:.1f}s in", flush=True)

        writers = [Writer(w, nodes, ledger, stop) for w in range(WRITERS)]
        for w in writers:
            w.start()
        time.sleep(WARMUP_S)
        t_faults = now()
        for c in range(CYCLES):
            fault_cycle(c, fdbs, nodes, ledger, cluster_file, timeline, pids_file, problems,
                        reports)
            print(f"cycle {c + 1} done, {now() - t_begin:.1f}s in", flush=True)
        t_stop = now()
        stop.set()
        for w in writers:
            w.join(HTTP_TIMEOUT_S + 5)
        for w in writers:
            if w.is_alive():
                problems.append(f"{w.name} did not stop within {HTTP_TIMEOUT_S + 5}s")
            if w.error:
                problems.append(f"{w.name} failed: {w.error}")
        outage_phase(fdbs, nodes, ledger, cluster_file, timeline, problems, stopped_fdbs,
                     outage)
        time.sleep(1)
        figures = verify(nodes, ledger, problems)
    except Exception as e:  # Deadline included: the summary and the clean-up still run
        problems.append(f"{type(e).__name__}: {e}")
        traceback.print_exc()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the clean-up runs to its end
        for pid in stopped_fdbs:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        stop.set()
        status_stop.set()
        for w in writers:
            w.join(HTTP_TIMEOUT_S + 5)
        if timeline is not None:
            timeline.join(20)  # its fdbcli call ends within 15 s
        if t_faults is not None:
            print_summary(reports, ledger, figures, t_faults, t_stop or now(), len(writers),
                          outage)
        for node in nodes:
            try:
                node.stop()
            except Exception as e:
                print(f"stopping node{node.idx}: {e}")
        if problems or ledger.anomalies:
            for node in nodes:
                lines = log_excerpt(node)
                if lines:
                    print(f"-- node{node.idx} log ({node.log}), warnings and errors:")
                    print("\n".join(f"   {ln[:400]}" for ln in lines))
        if cluster_started:
            # Every fdbserver pid, read before cluster.sh stop removes the list: those still
            # running once it has asked them to stop are killed.
            pids = [f.pid for f in fdbs]
            try:
                with open(pids_file) as f:
                    pids += [int(p) for p in f.read().split()]
            except OSError:
                pass
            subprocess.run(["bash", CLUSTER_SH, "stop", cluster_dir], stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=30)
            deadline = now() + 15
            while any(pid_alive(p) for p in pids) and now() < deadline:
                time.sleep(0.2)
            for p in pids:
                if pid_alive(p):
                    os.kill(p, signal.SIGKILL)
            for f in fdbs:
                if f.popen is not None:
                    f.popen.wait(10)
        if KEEP:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)

    for text in ledger.anomalies:
        problems.append(f"anomaly: {text}")
    for p in problems:
        print(f"FAIL: {p}")
    print(f"{'PASS' if not problems else 'FAILED'} in {now() - t_begin:.1f}s")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
