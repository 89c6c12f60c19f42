#!/usr/bin/env python3
"""Chaise on FoundationDB with 1, 2 and 3 nodes, beside embedded Chaise and CouchDB: the perf
workloads on each setup in one run, and one table.

  bench/http/nodes.py [--cluster-file F] [--nodes 1 2 3] [--embedded] [--couchdb URL]
                      [--workloads put get bulk changes all_docs feed] [--duration 10] [--docs 20000]
                      [--feed-writes 200] [--fdb-nice -10]

Setups, in this order: embedded Chaise (--embedded: storage_engine rocksdb, one node), Chaise on
FoundationDB with each count of nodes given to --nodes, CouchDB (--couchdb URL, a running server;
BENCH_PID=<its beam.smp pid> for its CPU). Each Chaise setup starts fresh: new data directories
and, on FoundationDB, a key_prefix of its own (and 64 io threads, 8 workers, and
[foundationdb] future_version_retry_delay = 300: see default.ini), so nothing carries
over; it stops every process it started, by pid, and deletes its databases at the end.

Without --cluster-file each FoundationDB setup gets a fresh one-process cluster ("single memory"),
started in a temporary directory with ../shared/fdb/cluster.sh (on FDB_PORT, default 4740, plus
the setup's place in the run; FDB_MEMORY, default 8GiB, of which FDB_STORAGE_MEMORY, default 4GiB,
for the memory engine's data) and stopped after it: one that had taken the setups before it gave the
three-node _bulk_docs a third of the rate a fresh one gives (9,760 against 27,770 docs/s). With --cluster-file, the CPU of the fdbserver processes running on
this machine with that cluster file is counted. The fdbserver processes get nice --fdb-nice
(default -10; 0 leaves them; root only, else a warning): on a machine whose cores the nodes and
wrk share with the cluster, a starved fdbserver stalls every node (give_priority).
Before each workload on FoundationDB the run waits (up to a minute) for the cluster to make
durable what the one before wrote, its storage servers' queue under 16 MB (settle).

Workloads (the connections are split evenly across the setup's nodes, one wrk per node, all run
at once; rates are summed, the p99 is the worst of them):
  put       PUT of new ~200-byte docs, 64 connections (put_new_docs.lua): docs/s
  get       GET of random docs among 1,000 preloaded, 64 connections (get_doc.lua): req/s
  bulk      _bulk_docs of 1,000 new docs, 4 connections (bulk_docs.lua): docs/s
  changes   a database of --docs docs loaded by _bulk_docs (4 clients over the nodes), then
            _changes read whole by curl from node 0 (rows/s); with more than one node, also from
            every node at once (rows/s summed)
  all_docs  the same database, _all_docs?include_docs=true, the same two ways
  feed      a continuous _changes feed on the last node, --feed-writes PUTs through node 0 one at
            a time: from each PUT's answer to the feed's row, both the kernel's receive times
            (SO_TIMESTAMPNS, as feeds.py ack): p50/p99
For every workload the CPU seconds (user + system, /proc/<pid>/stat) of each Chaise process (or
CouchDB's BENCH_PID) and of the fdbserver processes, and per request (document, row, PUT):
Chaise + FoundationDB, so that it shows where the time goes; and for put, get and bulk on
FoundationDB, the median of the cluster's own latency probe taken every 2 s during the run (read
version, read, commit of a transaction of the cluster controller's: what FoundationDB's queues add
to every transaction then, Probe). Before the workloads, the same
processes' CPU over 2 s at rest (per second), which every workload's figures include.
wrk waits 10 s for an answer (30 s for _bulk_docs); answers not 2xx and socket errors are counted
as failed beside the rate. A node that ends by itself ends its setup: its exit status and the
tail of its log are printed, the log kept as /tmp/chaise-nodes-exited-*.log.

FoundationDB's own ceiling for a document-write-shaped transaction on the same cluster is
../shared/fdb/ceiling.c (see ../shared/fdb/README.md).

Environment: BENCH_AUTH=user:password (Basic auth on every request; the admin of the Chaise
servers started here, which run in admin party without it), BENCH_PID, CHAISE_BIN (default
build/server/chaise), CHAISE_FDB_LIBRARY (default /tmp/chaise-fdb-bin/foundationdb/lib/libfdb_c.so),
FDB_PORT, FDB_MEMORY, FDB_STORAGE_MEMORY.
"""
import argparse
import base64
import json
import os
import re
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
sys.path.insert(0, here)
from client import quantile  # noqa: E402
from feeds import StampedWriter, stamped_recv, stamped_socket  # noqa: E402

sys.path.insert(0, os.path.join(root, "tests", "interop"))
from fdb_home import fdb_home_with  # noqa: E402

CHAISE_BIN = os.environ.get("CHAISE_BIN", os.path.join(root, "build/server/chaise"))
FDB_LIBRARY = os.environ.get("CHAISE_FDB_LIBRARY", "/tmp/chaise-fdb-bin/foundationdb/lib/libfdb_c.so")
FDBCLI = os.path.join(os.path.dirname(os.path.dirname(FDB_LIBRARY)), "bin", "fdbcli")
CLUSTER_SH = os.path.join(os.path.dirname(root), "shared/fdb/cluster.sh")
AUTH = os.environ.get("BENCH_AUTH", "")
AUTH_HEADER = "Basic " + base64.b64encode(AUTH.encode()).decode() if AUTH else ""
TICK = os.sysconf("SC_CLK_TCK")
HTTP_TIMEOUT = 120  # s, every HTTP call of the set-up and the reads
WORKLOADS = ["put", "get", "bulk", "changes", "all_docs", "feed"]
# The memory engine's share of a cluster's memory (fdbserver --storage-memory; FoundationDB's
# default, 1 GiB, filled by one setup's workloads: its ratekeeper then throttled _bulk_docs for
# storage_server_min_free_space, with stalls of seconds).
STORAGE_MEMORY = os.environ.get("FDB_STORAGE_MEMORY", "4GiB")


def http(base, method, path, body=None, timeout=HTTP_TIMEOUT):
    """One request: (status, the parsed answer or None)."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"}
    if AUTH_HEADER:
        headers["Authorization"] = AUTH_HEADER
    req = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, None


def cpu_seconds(pid):
    """User + system CPU seconds a process has used (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK


def split(total, parts):
    """total connections over parts nodes, as evenly as they go."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


# --- processes ---------------------------------------------------------------------------------

def start_cluster(d, port):
    """A one-process FoundationDB cluster in the directory d: (cluster file, pids). The caller
    stops it with stop_cluster(d), whether this returns or not."""
    env = dict(os.environ, FDB_PORT=str(port), FDB_MEMORY=os.environ.get("FDB_MEMORY", "8GiB"),
               FDB_HOME=fdb_home_with(d, os.path.dirname(os.path.dirname(FDB_LIBRARY)),
                                      ["--storage-memory", STORAGE_MEMORY]))
    r = subprocess.run([CLUSTER_SH, "start", d], env=env, capture_output=True, text=True, timeout=180)
    if r.returncode != 0:
        raise RuntimeError(f"cluster.sh start failed: {r.stdout}{r.stderr}")
    return os.path.join(d, "fdb.cluster"), fdb_pids_of(d)


def give_priority(pids, nice):
    """Sets the fdbserver processes' nice value (root only): the cluster is the resource every
    node shares, and on a machine where the nodes and wrk compete with it for the same cores a
    starved fdbserver lets its GRV proxy's rate lease expire (GrvProxyRateLeaseExpired in its
    trace), which stops every node's transactions for seconds. A deployment gives FoundationDB
    cores of its own; this stands for that. What was done is printed."""
    if nice == 0 or not pids:
        return "default priority"
    try:
        for pid in pids:
            os.setpriority(os.PRIO_PROCESS, pid, nice)
    except PermissionError:
        print(f"fdbserver keeps the default priority: setting nice {nice} is not permitted", flush=True)
        return "default priority (nice not permitted)"
    return f"nice {nice}"


def fdb_pids_of(d):
    try:
        with open(os.path.join(d, "pids")) as f:
            return [int(line) for line in f if line.strip()]
    except OSError:
        return []


def stop_cluster(d):
    pids = fdb_pids_of(d)
    try:
        subprocess.run([CLUSTER_SH, "stop", d], capture_output=True, timeout=60)
    except subprocess.TimeoutExpired:
        pass
    for pid in pids:
        stop_pid(pid, "fdbserver")
    shutil.rmtree(d, ignore_errors=True)


def stop_pid(pid, name):
    """Ends one process this script started (not a child of it), by pid: SIGTERM, then SIGKILL."""
    def alive():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return name.encode() in f.read()
        except OSError:
            return False
    deadline = time.time() + 15
    while alive() and time.time() < deadline:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            return
        time.sleep(0.2)
    if alive():
        os.kill(pid, signal.SIGKILL)


def fdbservers_for(cluster_file):
    """The fdbserver processes on this machine started with this cluster file."""
    want = os.path.realpath(cluster_file)
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if not args or not args[0].endswith("fdbserver"):
            continue
        for i, a in enumerate(args):
            path = args[i + 1] if a in ("-C", "--cluster-file", "--cluster_file") and i + 1 < len(args) else \
                a.split("=", 1)[1] if a.startswith(("--cluster-file=", "--cluster_file=")) else None
            if path and os.path.realpath(path) == want:
                pids.append(int(entry))
    return pids


class Chaise:
    """One build/server/chaise on a free port and a new data directory, as lib.sh's start_chaise."""

    def __init__(self, ini):
        self.dir = tempfile.mkdtemp(prefix="chaise-nodes-")
        cmd = [CHAISE_BIN, "--port", "0", "--data-dir", os.path.join(self.dir, "data"),
               "--config", os.path.join(root, "config/default.ini")]
        if ini:
            # Each node its own ini: a server writes the admin's password hash back to it.
            path = os.path.join(self.dir, "extra.ini")
            with open(path, "w") as f:
                f.write(ini)
            cmd += ["--config", path]
        env = dict(os.environ)
        if AUTH:
            env["COUCHDB_USER"], env["COUCHDB_PASSWORD"] = AUTH.split(":", 1)
        else:
            cmd.append("--admin-party")
        with open(os.path.join(self.dir, "log"), "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, env=env)
        self.pid = self.proc.pid
        line = self._first_line(60)
        m = re.search(r"listening on .*:(\d+)\s*$", line)
        if not m:
            self.stop()
            raise RuntimeError(f"chaise did not start: {line!r}; log: {self.log_tail()}")
        self.base = f"http://127.0.0.1:{m.group(1)}"
        # The rest of stdout is read and dropped: the pipe stays open, the server never blocks on it.
        threading.Thread(target=self._drain, daemon=True).start()
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if http(self.base, "GET", "/_up", timeout=5)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"chaise at {self.base} not up after 60 s; log: {self.log_tail()}")

    def _first_line(self, timeout):
        fd, buf, deadline = self.proc.stdout.fileno(), b"", time.time() + timeout
        while b"\n" not in buf and time.time() < deadline:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.time()))
            if not ready:
                break
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buf += chunk
        return buf.split(b"\n", 1)[0].decode(errors="replace")

    def _drain(self):
        try:
            while os.read(self.proc.stdout.fileno(), 65536):
                pass
        except (OSError, ValueError):
            pass

    def log_tail(self):
        try:
            with open(os.path.join(self.dir, "log"), errors="replace") as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def ended(self):
        """None while the server runs; once it has ended by itself, how (its log kept in a file
        of its own, since the data directory goes with the setup)."""
        code = self.proc.poll()
        if code is None:
            return None
        kept = tempfile.NamedTemporaryFile(prefix="chaise-nodes-exited-", suffix=".log", delete=False)
        with kept, open(os.path.join(self.dir, "log"), "rb") as log:
            shutil.copyfileobj(log, kept)
        how = f"signal {-code}" if code < 0 else f"exit status {code}"
        return f"{self.base} (pid {self.pid}) ended by itself, {how}; its log: {kept.name}\n{self.log_tail()}"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


class Setup:
    """The servers of one column: their base URLs, the pids whose CPU is counted, what to stop."""

    def __init__(self, name, kind):
        self.name, self.kind = name, kind  # kind: embedded, fdb or couchdb
        self.nodes, self.server_pids, self.fdb_pids, self.chaise = [], [], [], []
        self.cluster_file = None  # FoundationDB setups: for the latency probe

    def cpu(self):
        return ([cpu_seconds(p) for p in self.server_pids], [cpu_seconds(p) for p in self.fdb_pids])

    def stop(self):
        for c in reversed(self.chaise):
            c.stop()


# --- measurements ------------------------------------------------------------------------------

def fdb_status(cluster_file, section):
    """One section of `status json`'s cluster object (None: the whole of it), or None when fdbcli
    does not answer within 2 s (a cluster busy with a write load may not)."""
    try:
        out = subprocess.run([FDBCLI, "-C", cluster_file, "--timeout", "2", "--exec", "status json"],
                             capture_output=True, text=True, timeout=10).stdout
        cluster = json.loads(out)["cluster"]
        return cluster if section is None else cluster.get(section)
    except (subprocess.SubprocessError, ValueError, KeyError, TypeError):
        return None


class Probe:
    """FoundationDB's own latencies during one measurement: every 2 s, `status json`'s
    cluster.latency_probe, the cluster controller's timing of a read version, a read and a commit
    of its own transaction, which waits in the same queues as the workload's; and what its
    ratekeeper named as the limit then (qos.performance_limited_by), when not the workload itself.
    Nothing on a setup that is not on FoundationDB or when fdbcli is missing; a sample whose
    status does not answer within 2 s is left out (and counted)."""

    def __init__(self, setup):
        self.samples, self.missed, self.limits = [], 0, {}
        self.stop_event, self.thread = threading.Event(), None
        if setup.kind == "fdb" and setup.cluster_file and os.access(FDBCLI, os.X_OK):
            self.thread = threading.Thread(target=self.run, args=(setup.cluster_file,), daemon=True)
            self.thread.start()

    def run(self, cluster_file):
        while not self.stop_event.wait(2.0):
            cluster = fdb_status(cluster_file, None)
            try:
                lp = cluster["latency_probe"]
                self.samples.append((lp["transaction_start_seconds"], lp["read_seconds"], lp["commit_seconds"]))
                limit = cluster.get("qos", {}).get("performance_limited_by", {}).get("name", "")
                if limit and limit != "workload":
                    self.limits[limit] = self.limits.get(limit, 0) + 1
            except (KeyError, TypeError):
                self.missed += 1

    def end(self):
        if self.thread:
            self.stop_event.set()
            self.thread.join(timeout=15)

    def cell(self):
        """'GRV 1.2 / read 0.4 / commit 3.1 ms (median of 4)', or '' without samples."""
        if not self.samples:
            return f"no answer ({self.missed} tries)" if self.missed else ""
        med = [quantile([x[i] * 1000 for x in self.samples], 0.5) for i in range(3)]
        missed = f", {self.missed} unanswered" if self.missed else ""
        limits = "".join(f"; limited by {name} x{n}" for name, n in sorted(self.limits.items()))
        return (f"{med[0]:.2f} / {med[1]:.2f} / {med[2]:.2f} ms "
                f"(median of {len(self.samples)}{missed}{limits})")


class Cpu:
    """CPU seconds of the setup's processes over one measurement, and FoundationDB's latency probe
    over it."""

    def __init__(self, setup):
        self.setup, self.t0 = setup, setup.cpu()
        self.probe = Probe(setup)

    def end(self):
        self.probe.end()
        t1 = self.setup.cpu()
        self.server = [b - a if a is not None and b is not None else None for a, b in zip(self.t0[0], t1[0])]
        self.fdb = [b - a if a is not None and b is not None else None for a, b in zip(self.t0[1], t1[1])]
        return self

    def seconds(self):
        """'chaise 1.20 1.10 s, fdbserver 2.30 s' for the progress lines."""
        label = "couchdb" if self.setup.kind == "couchdb" else "chaise"
        fmt = lambda xs: " ".join("?" if x is None else f"{x:.2f}" for x in xs)
        out = f"{label} {fmt(self.server)} s" if self.server else f"{label} (no pid)"
        if self.setup.kind == "fdb":
            out += f", fdbserver {fmt(self.fdb)} s" if self.fdb else ", fdbserver (no pid)"
        return out

    def per(self, units):
        """The table's cell: CPU per unit in us (Chaise + FoundationDB) and the seconds by process."""
        if not units or not self.server or None in self.server:
            return "-"
        server = sum(self.server)
        cell = f"{server / units * 1e6:,.0f}"
        by_process = " + ".join(f"{x:.2f}" for x in self.server)
        if self.setup.kind == "fdb":
            if self.fdb and None not in self.fdb:
                cell += f" + {sum(self.fdb) / units * 1e6:,.0f}"
                by_process += " / " + " + ".join(f"{x:.2f}" for x in self.fdb)
            else:
                cell += " + ?"
        return f"{cell} us ({by_process} s)"


def parse_latency_ms(text):
    m = re.match(r"([\d.]+)(us|ms|s|m)$", text)
    if not m:
        return None
    return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[m.group(2)]


def wrk_split(setup, script, conns, duration, env_extra, timeout_s="10s"):
    """One wrk per node, conns split across them, all at once: (requests, req/s, worst p99 ms,
    errors, Cpu)."""
    parts = split(conns, len(setup.nodes))
    env = dict(os.environ, BENCH_AUTH_HEADER=AUTH_HEADER, **env_extra)
    procs = []
    cpu = Cpu(setup)
    try:
        for base, c in zip(setup.nodes, parts):
            if c == 0:
                continue
            threads = min(2, c) if len(setup.nodes) == 1 else 1
            cmd = ["wrk", "-t", str(threads), "-c", str(c), "-d", f"{duration}s", "--latency",
                   "--timeout", timeout_s, "-s", os.path.join(here, script), base]
            if AUTH_HEADER:
                cmd[1:1] = ["-H", "Authorization: " + AUTH_HEADER]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True, env=env))
        outs = [p.communicate(timeout=duration + 60)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
    cpu.end()
    requests, rate, p99, errors = 0, 0.0, 0.0, 0
    for out in outs:
        m = re.search(r"(\d+) requests in", out)
        requests += int(m.group(1)) if m else 0
        m = re.search(r"Requests/sec:\s*([\d.]+)", out)
        rate += float(m.group(1)) if m else 0.0
        m = re.search(r"^\s*99%\s+(\S+)", out, re.M)
        p99 = max(p99, parse_latency_ms(m.group(1)) if m else 0.0)
        m = re.search(r"Non-2xx or 3xx responses:\s*(\d+)", out)
        errors += int(m.group(1)) if m else 0
        m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
        errors += sum(int(x) for x in m.groups()) if m else 0
        if not re.search(r"Requests/sec", out):
            print(f"      wrk: {out.strip()[-500:]}", flush=True)
    return requests, rate, p99, errors, cpu


def fresh_db(setup, db):
    """Deletes and creates db through node 0; returns once every node sees it."""
    base = setup.nodes[0]
    http(base, "DELETE", "/" + db)
    status, body = http(base, "PUT", "/" + db)
    if status not in (201, 202):
        raise RuntimeError(f"cannot create {db}: HTTP {status} {body}")
    deadline = time.time() + 30
    for node in setup.nodes:
        while http(node, "GET", "/" + db)[0] != 200:
            if time.time() > deadline:
                raise RuntimeError(f"{node} does not see {db}")
            time.sleep(0.1)


def errors_note(errors):
    return f", {errors:,} failed" if errors else ""


def run_put(setup, a):
    fresh_db(setup, "bench_put")
    n, rate, p99, errors, cpu = wrk_split(setup, "put_new_docs.lua", 64, a.duration,
                                          {"BENCH_DB": "bench_put"})
    print(f"put   {setup.name}: {rate:,.0f} docs/s, p99 {p99:.2f} ms{errors_note(errors)}; "
          f"CPU {cpu.seconds()} over {n:,} PUTs", flush=True)
    return {"put": f"{rate:,.0f}, p99 {p99:.2f} ms{errors_note(errors)}", "put_cpu": cpu.per(n),
            "put_fdb": cpu.probe.cell()}


def run_get(setup, a):
    fresh_db(setup, "bench_get")
    docs = [{"_id": "d%06d" % i, "value": i, "note": "x" * 150} for i in range(1000)]
    status, _ = http(setup.nodes[0], "POST", "/bench_get/_bulk_docs", {"docs": docs})
    if status not in (201, 202):
        raise RuntimeError(f"preload of bench_get: HTTP {status}")
    n, rate, p99, errors, cpu = wrk_split(setup, "get_doc.lua", 64, a.duration,
                                          {"BENCH_DB": "bench_get", "BENCH_DOCS": "1000"})
    print(f"get   {setup.name}: {rate:,.0f} req/s, p99 {p99:.2f} ms{errors_note(errors)}; "
          f"CPU {cpu.seconds()} over {n:,} GETs", flush=True)
    return {"get": f"{rate:,.0f}, p99 {p99:.2f} ms{errors_note(errors)}", "get_cpu": cpu.per(n),
            "get_fdb": cpu.probe.cell()}


def run_bulk(setup, a):
    fresh_db(setup, "bench_bulk")
    n, rate, p99, errors, cpu = wrk_split(setup, "bulk_docs.lua", 4, a.duration,
                                          {"BENCH_DB": "bench_bulk"}, timeout_s="30s")
    print(f"bulk  {setup.name}: {rate * 1000:,.0f} docs/s, p99 {p99:.1f} ms{errors_note(errors)}; "
          f"CPU {cpu.seconds()} over {n * 1000:,} docs; FDB probe {cpu.probe.cell() or '-'}", flush=True)
    return {"bulk": f"{rate * 1000:,.0f}, p99 {p99:.0f} ms{errors_note(errors)}",
            "bulk_cpu": cpu.per(n * 1000), "bulk_fdb": cpu.probe.cell()}


def load_scan_db(setup, a):
    """bench_scan with --docs docs (~130-byte bodies, server-made ids) by _bulk_docs of 1,000,
    4 clients, the batches spread over the nodes."""
    fresh_db(setup, "bench_scan")
    sizes = [min(1000, a.docs - start) for start in range(0, a.docs, 1000)]
    bodies = {k: {"docs": [{"type": "row", "n": i, "note": "x" * 100} for i in range(k)]} for k in set(sizes)}

    def post(i):
        status, _ = http(setup.nodes[i % len(setup.nodes)], "POST", "/bench_scan/_bulk_docs", bodies[sizes[i]])
        if status not in (201, 202):
            raise RuntimeError(f"load of bench_scan: HTTP {status}")

    t0 = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(post, range(len(sizes))))
    rate = a.docs / (time.perf_counter() - t0)
    print(f"load  {setup.name}: {a.docs:,} docs by _bulk_docs (4 clients over {len(setup.nodes)} "
          f"node(s)): {rate:,.0f} docs/s", flush=True)
    return {"load": f"{rate:,.0f}"}


def read_whole(setup, nodes, path):
    """path read whole by curl from each of nodes at once: (rows in all, seconds, Cpu)."""
    outs = []
    for _ in nodes:
        fd, out = tempfile.mkstemp(prefix="chaise-nodes-scan-", suffix=".json")
        os.close(fd)
        outs.append(out)
    procs = []
    cpu = Cpu(setup)
    t0 = time.perf_counter()
    try:
        for base, out in zip(nodes, outs):
            cmd = ["curl", "-sf", "--max-time", str(HTTP_TIMEOUT * 5), "-o", out, base + path]
            if AUTH:
                cmd[1:1] = ["-u", AUTH]
            procs.append(subprocess.Popen(cmd))
        codes = [p.wait(timeout=HTTP_TIMEOUT * 5 + 30) for p in procs]
        seconds = time.perf_counter() - t0
        cpu.end()
        if any(codes):
            raise RuntimeError(f"curl {path}: exit codes {codes}")
        rows = 0
        for out in outs:
            with open(out) as f:
                d = json.load(f)
            rows += len(d.get("rows", d.get("results", [])))
        return rows, seconds, cpu
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
        for out in outs:
            os.unlink(out)


def run_scan(setup, a, key, path):
    cells = {}
    rows, seconds, cpu = read_whole(setup, setup.nodes[:1], "/bench_scan/" + path)
    note = "" if rows == a.docs else f" ({rows:,} rows, {a.docs:,} expected)"
    print(f"scan  {setup.name}: {path} from node 0: {rows:,} rows in {seconds:.2f} s = "
          f"{rows / seconds:,.0f} rows/s{note}; CPU {cpu.seconds()}", flush=True)
    cells[key] = f"{rows / seconds:,.0f}{note}"
    cells[key + "_cpu"] = cpu.per(rows)
    if len(setup.nodes) > 1:
        rows, seconds, cpu = read_whole(setup, setup.nodes, "/bench_scan/" + path)
        expected = a.docs * len(setup.nodes)
        note = "" if rows == expected else f" ({rows:,} rows, {expected:,} expected)"
        print(f"scan  {setup.name}: {path} from {len(setup.nodes)} nodes at once: {rows:,} rows in "
              f"{seconds:.2f} s = {rows / seconds:,.0f} rows/s{note}; CPU {cpu.seconds()}", flush=True)
        cells[key + "_all"] = f"{rows / seconds:,.0f}{note}"
        cells[key + "_all_cpu"] = cpu.per(rows)
    return cells


def run_feed(setup, a):
    """A continuous feed on the last node; PUTs through node 0, each after the one before reached
    the feed: from the PUT's answer to the feed's row, both as the kernel received them."""
    db = "bench_feed"
    fresh_db(setup, db)
    feed_url = urllib.parse.urlsplit(setup.nodes[-1])
    put_url = urllib.parse.urlsplit(setup.nodes[0])
    auth_line = f"Authorization: {AUTH_HEADER}\r\n" if AUTH_HEADER else ""
    feed = stamped_socket(feed_url.hostname, feed_url.port)
    feed.settimeout(0.2)
    feed.sendall(f"GET /{db}/_changes?feed=continuous&since=now&heartbeat=10000 HTTP/1.1\r\n"
                 f"Host: {feed_url.hostname}\r\n{auth_line}\r\n".encode())
    arrived, cond, stop = {}, threading.Condition(), threading.Event()

    def read_feed():
        # Rows are whole lines; the chunk-size lines do not start with {"seq".
        pending = b""
        while not stop.is_set():
            try:
                data, kernel, now = stamped_recv(feed)
            except socket.timeout:
                continue
            except OSError:
                return
            if not data:
                return
            lines = (pending + data).split(b"\n")
            pending = lines.pop()
            with cond:
                for line in lines:
                    at = line.find(b'"id":"')
                    if line.startswith(b'{"seq"') and at >= 0:
                        arrived.setdefault(line[at + 6:line.index(b'"', at + 6)].decode(), kernel or now)
                cond.notify_all()

    reader = threading.Thread(target=read_feed, daemon=True)
    reader.start()
    writer = None
    try:
        time.sleep(1.0)
        writer = StampedWriter(put_url.hostname, put_url.port, AUTH_HEADER)
        writer.sock.settimeout(30)
        lat, failed, undelivered = [], 0, 0
        cpu = Cpu(setup)
        for n in range(a.feed_writes):
            doc_id = f"w{n}"
            status, ack, _ = writer.put(f"/{db}/{doc_id}", {"n": n})
            if status not in (201, 202):
                failed += 1
                continue
            with cond:
                if cond.wait_for(lambda: doc_id in arrived, timeout=10):
                    # A row can arrive before its PUT's answer does: that counts as 0.
                    lat.append(max(0.0, (arrived[doc_id] - ack) * 1000))
                else:
                    undelivered += 1
        cpu.end()
    finally:
        stop.set()
        reader.join(timeout=5)
        feed.close()
        if writer:
            writer.sock.close()
    if not lat:
        raise RuntimeError(f"no row reached the feed ({failed} PUTs failed)")
    note = ""
    if failed or undelivered:
        note = f", {failed} failed, {undelivered} undelivered"
    p50, p99 = quantile(lat, 0.50), quantile(lat, 0.99)
    print(f"feed  {setup.name}: {a.feed_writes} PUTs on node 0, feed on node {len(setup.nodes) - 1}: "
          f"ack -> row p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {max(lat):.2f} ms{note}; "
          f"CPU {cpu.seconds()}", flush=True)
    return {"feed": f"{p50:.2f} / {p99:.2f} ms{note}", "feed_cpu": cpu.per(a.feed_writes - failed)}


def run_idle(setup, seconds=2):
    """The setup's CPU at rest, before any workload: what the rows' CPU includes anyway."""
    cpu = Cpu(setup)
    time.sleep(seconds)
    cpu.end()
    print(f"idle  {setup.name}: CPU {cpu.seconds()} over {seconds} s", flush=True)
    fmt = lambda xs: " + ".join("?" if x is None else f"{x / seconds:.3f}" for x in xs)
    if not cpu.server:
        return {}
    cell = fmt(cpu.server)
    if setup.kind == "fdb" and cpu.fdb:
        cell += " / " + fmt(cpu.fdb)
    return {"idle": cell}


def fdb_storage_queue(cluster_file):
    """The largest storage server queue in bytes (None if the status does not tell): what the
    storage servers have yet to make durable. (The log servers' queue can stay at tens of MB for
    minutes after a write load, until the storage servers' pops reach it.)"""
    qos = fdb_status(cluster_file, "qos")
    try:
        return qos["worst_queue_bytes_storage_server"]
    except (KeyError, TypeError):
        return None


def settle(setup, below=16 << 20, limit_s=60):
    """On FoundationDB, waits until the cluster has made durable what the last workload wrote (the
    storage servers' queue under 16 MB, at most a minute): a storage server still writing out a
    _bulk_docs run holds up the next workload's reads (a feed's p99 went from 1 to 14 ms), and
    each workload is measured from a cluster at rest, as the embedded store is."""
    if setup.kind != "fdb" or not setup.cluster_file or not os.access(FDBCLI, os.X_OK):
        return
    t0 = time.time()
    while time.time() - t0 < limit_s:
        queued = fdb_storage_queue(setup.cluster_file)
        if queued is not None and queued < below:
            if time.time() - t0 > 1.5:
                print(f"      settled: the storage queue under {below >> 20} MB after "
                      f"{time.time() - t0:.0f} s", flush=True)
            return
        time.sleep(1)
    print(f"      the storage queue still holds {queued} bytes after {limit_s} s", flush=True)


def run_setup(setup, a):
    cells = run_idle(setup)
    loaded = False
    for done, w in enumerate(a.workloads):
        try:
            if w == "put":
                cells.update(run_put(setup, a))
            elif w == "get":
                cells.update(run_get(setup, a))
            elif w == "bulk":
                cells.update(run_bulk(setup, a))
            elif w in ("changes", "all_docs"):
                if not loaded:
                    cells.update(load_scan_db(setup, a))
                    loaded = True
                if w == "changes":
                    cells.update(run_scan(setup, a, "changes", "_changes"))
                else:
                    cells.update(run_scan(setup, a, "all_docs", "_all_docs?include_docs=true"))
            elif w == "feed":
                cells.update(run_feed(setup, a))
        except Exception as e:  # one workload's failure leaves the others to run
            print(f"{w}: {setup.name} failed: {e}", flush=True)
            traceback.print_exc()
            cells[w] = "failed"
        ended = [m for m in (c.ended() for c in setup.chaise) if m]
        if ended:
            # A node that ended takes the setup with it: the workloads left are not run.
            print("\n".join(ended), flush=True)
            cells[w] = cells.get(w, "") + " (a node ended)"
            for rest in a.workloads[done + 1:]:
                cells[rest] = "not run (a node ended)"
            break
        time.sleep(1)  # the servers finish what the load left (flushes, compactions) apart
        settle(setup)
    for db in ("bench_put", "bench_get", "bench_bulk", "bench_scan", "bench_feed"):
        try:
            http(setup.nodes[0], "DELETE", "/" + db, timeout=60)
        except OSError:
            pass
    return cells


def rows_for(a):
    """(key, title) of the table's rows, for the workloads asked for."""
    rows = [("idle", "at rest: CPU s per s (each chaise / fdbserver)")]
    for w in a.workloads:
        if w == "put":
            rows += [("put", "PUT new ~200-byte docs, 64 conns: docs/s, worst p99"),
                     ("put_cpu", "put: CPU per PUT, Chaise + FDB (s: each chaise / fdbserver)"),
                     ("put_fdb", "put: FoundationDB probe: read version / read / commit")]
        elif w == "get":
            rows += [("get", "GET one of 1,000 docs, 64 conns: req/s, worst p99"),
                     ("get_cpu", "get: CPU per GET"),
                     ("get_fdb", "get: FoundationDB probe: read version / read / commit")]
        elif w == "bulk":
            rows += [("bulk", "`_bulk_docs` x1,000, 4 conns: docs/s, worst p99"),
                     ("bulk_cpu", "bulk: CPU per doc"),
                     ("bulk_fdb", "bulk: FoundationDB probe: read version / read / commit")]
        elif w in ("changes", "all_docs"):
            if not any(k == "load" for k, _ in rows):
                rows.append(("load", f"load {a.docs:,} docs, `_bulk_docs` x1,000, 4 clients: docs/s"))
            path = "`_changes`" if w == "changes" else "`_all_docs?include_docs=true`"
            rows += [(w, f"{path} from node 0: rows/s"), (w + "_cpu", f"{w}: CPU per row"),
                     (w + "_all", f"{path} from every node at once: rows/s in all"),
                     (w + "_all_cpu", f"{w}, every node: CPU per row")]
        elif w == "feed":
            rows += [("feed", f"feed on the last node, {a.feed_writes} PUTs on node 0 one at a time: "
                              "ack -> row p50 / p99"),
                     ("feed_cpu", "feed: CPU per PUT")]
    return rows


def print_table(setups, results, a):
    header = ["Workload"] + [s.name for s in setups]
    table = [header, ["---"] * len(header)]
    for key, title in rows_for(a):
        cells = [results.get(s.name, {}).get(key, "") for s in setups]
        if key.endswith(("_all", "_all_cpu")) and all(len(s.nodes) < 2 for s in setups):
            continue
        table.append([title] + cells)
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    print()
    for r in table:
        if r[0] == "---":
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
        else:
            print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cluster-file")
    ap.add_argument("--nodes", type=int, nargs="*", default=[1, 2, 3])
    ap.add_argument("--embedded", action="store_true")
    ap.add_argument("--couchdb")
    ap.add_argument("--workloads", nargs="+", default=WORKLOADS, choices=WORKLOADS)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--feed-writes", type=int, default=200)
    ap.add_argument("--fdb-nice", type=int, default=-10)
    a = ap.parse_args()
    a.nodes = list(dict.fromkeys(a.nodes))  # each count once: a column per setup
    # A SIGTERM unwinds like Ctrl-C, through the finally blocks that stop every process.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    names = (["embedded"] if a.embedded else []) + \
            [f"FDB, {n} node{'s' if n > 1 else ''}" for n in a.nodes] + \
            (["CouchDB"] if a.couchdb else [])
    if not names:
        ap.error("nothing to measure: give --nodes, --embedded or --couchdb")
    results = {}
    setups = []
    cluster = None  # the directory of the cluster started here
    run_id = f"{int(time.time())}-{secrets.token_hex(4)}"
    try:
        cluster_file, fdb_pids = a.cluster_file, []
        if a.nodes and cluster_file:
            fdb_pids = fdbservers_for(cluster_file)
            if not fdb_pids:
                print(f"no fdbserver on this machine runs with {cluster_file}: FDB CPU is not counted")
            print(f"FoundationDB: {cluster_file}, fdbserver pids {fdb_pids}, "
                  f"{give_priority(fdb_pids, a.fdb_nice)}", flush=True)
        print(f"workloads {' '.join(a.workloads)}; {a.duration} s per wrk run, {a.docs:,} docs for the "
              f"scans, {a.feed_writes} feed PUTs; auth {'Basic' if AUTH else 'none (admin party)'}", flush=True)

        for number, name in enumerate(names):
            setup = Setup(name, "embedded" if name == "embedded" else "couchdb" if name == "CouchDB" else "fdb")
            setups.append(setup)
            try:
                if setup.kind == "couchdb":
                    setup.nodes = [a.couchdb.rstrip("/")]
                    if os.environ.get("BENCH_PID"):
                        setup.server_pids = [int(os.environ["BENCH_PID"])]
                elif setup.kind == "embedded":
                    setup.chaise.append(Chaise(""))
                else:
                    if not a.cluster_file:  # a fresh cluster for each setup, on a port of its own
                        if cluster:
                            stop_cluster(cluster)
                        cluster = tempfile.mkdtemp(prefix="chaise-nodes-fdb-")
                        port = int(os.environ.get("FDB_PORT", "4740")) + number
                        cluster_file, fdb_pids = start_cluster(cluster, port)
                        print(f"FoundationDB: {cluster_file}, fdbserver pids {fdb_pids}, "
                              f"{give_priority(fdb_pids, a.fdb_nice)}", flush=True)
                    count = int(name.split()[1])
                    prefix = f"bench-nodes/{run_id}/{number}/"
                    # 64 io threads and 8 workers: a request waits for the cluster on its thread,
                    # so they are the requests in flight (bench/README.md, "Storage engines").
                    ini = (f"[chaise]\nstorage_engine = foundationdb\nio_threads = 64\n"
                           f"worker_threads = 8\n[foundationdb]\n"
                           f"cluster_file = {cluster_file}\nlibrary = {FDB_LIBRARY}\nkey_prefix = {prefix}\n"
                           f"future_version_retry_delay = 300\n")
                    for _ in range(count):  # one after the other: the first sets the prefix up
                        setup.chaise.append(Chaise(ini))
                    setup.fdb_pids, setup.cluster_file = fdb_pids, cluster_file
                if setup.chaise:
                    setup.nodes = [c.base for c in setup.chaise]
                    setup.server_pids = [c.pid for c in setup.chaise]
                print(f"\n== {name}: {' '.join(setup.nodes)}"
                      f"{', pids ' + ' '.join(map(str, setup.server_pids)) if setup.server_pids else ''}",
                      flush=True)
                results[name] = run_setup(setup, a)
            except Exception as e:
                print(f"{name} failed: {e}", flush=True)
                traceback.print_exc()
                results[name] = {w: "failed" for w in a.workloads}
            finally:
                setup.stop()
    finally:
        for s in setups:
            s.stop()
        if cluster:
            stop_cluster(cluster)
    print_table(setups, results, a)


if __name__ == "__main__":
    main()
