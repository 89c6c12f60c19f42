#!/usr/bin/env python3
"""Live-feed benchmarks against a running Chaise (or any CouchDB) on 127.0.0.1.

  feeds.py latency  BASE_URL [--feeds 1000] [--writes 200]
      Opens N continuous _changes feeds (since=now), then writes documents one at a time and
      measures, for every write, how long each feed takes to see it. Prints p50/p99/max.
  feeds.py ack      BASE_URL [--feeds 200] [--writes 500] [--interval-ms 10]
      Opens N continuous feeds (since=now), then sends the writes open-loop, one PUT every
      interval whatever the answers, and measures from each PUT's acknowledgement to each
      feed's receipt of it (a receipt before the acknowledgement counts as 0), both taken as
      the kernel's receive times of the bytes (SO_TIMESTAMPNS). The issue 10 shape.
  feeds.py idle     BASE_URL --pid PID [--feeds 10000] [--seconds 60]
      Opens N continuous feeds with a 30 s heartbeat, then samples the server's RSS and CPU time
      (from /proc/PID) over the given time.
  feeds.py shards   BASE_URL [--docs 1000000] [--shards 4]
      Loads DOCS documents into a database resharded to SHARDS shards, then reads the whole
      feed once through /_changes and once through the SHARDS shard feeds in parallel.
Basic auth: BENCH_AUTH_HEADER="Basic ..." is sent on every request (run.sh sets it from BENCH_AUTH).
"""
import argparse
import asyncio
import json
import os
import queue
import re
import resource
import selectors
import socket
import statistics
import struct
import threading
import time
import urllib.request


def http(base, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"}
    if os.environ.get("BENCH_AUTH_HEADER"):
        headers["Authorization"] = os.environ["BENCH_AUTH_HEADER"]
    req = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def fresh_db(base, name):
    http(base, "DELETE", "/" + name)
    status, _ = http(base, "PUT", "/" + name)
    assert status == 201, status


async def open_feed(host, port, path):
    reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
    auth = os.environ.get("BENCH_AUTH_HEADER")
    auth = f"Authorization: {auth}\r\n" if auth else ""
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{auth}\r\n".encode())
    await writer.drain()
    while (await reader.readline()) not in (b"\r\n", b""):
        pass  # response head
    return reader, writer


async def read_ids(reader, seen, feed_no):
    """Reads chunked continuous-feed lines; records (feed, id) -> arrival time."""
    buf = b""
    while True:
        size_line = await reader.readline()
        if not size_line:
            return
        size = int(size_line.strip() or b"0", 16)
        if size == 0:
            return
        chunk = await reader.readexactly(size + 2)
        buf += chunk[:-2]
        *lines, buf = buf.split(b"\n")
        now = time.perf_counter()
        for line in lines:
            if line.startswith(b'{"seq"'):
                seen[(feed_no, json.loads(line)["id"])] = now


async def latency(base, feeds, writes):
    host, port = base.split("//")[1].split(":")
    fresh_db(base, "benchfeeds")
    seen = {}
    conns = [await open_feed(host, int(port), "/benchfeeds/_changes?feed=continuous&since=now&heartbeat=30000")
             for _ in range(feeds)]
    tasks = [asyncio.create_task(read_ids(r, seen, i)) for i, (r, _) in enumerate(conns)]
    await asyncio.sleep(1.0)
    lat = []
    loop = asyncio.get_running_loop()
    for n in range(writes):
        doc_id = f"w{n}"
        t0 = time.perf_counter()
        await loop.run_in_executor(None, http, base, "PUT", f"/benchfeeds/{doc_id}", {"n": n})
        deadline = time.perf_counter() + 10
        while sum(1 for i in range(feeds) if (i, doc_id) in seen) < feeds and time.perf_counter() < deadline:
            await asyncio.sleep(0.0005)
        lat += [(seen[(i, doc_id)] - t0) * 1000 for i in range(feeds) if (i, doc_id) in seen]
        await asyncio.sleep(0.005)
    for t in tasks:
        t.cancel()
    for _, w in conns:
        w.close()
    lat.sort()
    missing = feeds * writes - len(lat)
    q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))]
    print(f"latency: {feeds} continuous feeds x {writes} writes (write = PUT incl. fsync'd commit)")
    print(f"  p50 {q(0.50):.2f} ms  p99 {q(0.99):.2f} ms  max {lat[-1]:.2f} ms  undelivered {missing}")


# SO_TIMESTAMPNS (Linux, every architecture but a few with their own numbers): recvmsg then
# reports when the kernel received the bytes it returns (for TCP, the last segment it read).
SO_TIMESTAMPNS = 35


def stamped_socket(host, port):
    s = socket.create_connection((host, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    return s


def stamped_recv(s):
    """recvmsg: (bytes, the kernel's receive time or None, the time now), both as time.time()."""
    data, anc, _, _ = s.recvmsg(1 << 16, socket.CMSG_SPACE(16))
    now = time.time()
    kernel = None
    for level, kind, value in anc:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(value) >= 16:
            sec, ns = struct.unpack("qq", value[:16])
            kernel = sec + ns / 1e9
    return data, kernel, now


class StampedWriter:
    """One keep-alive connection that PUTs documents and notes when each answer arrived."""

    def __init__(self, host, port, auth):
        self.sock = stamped_socket(host, port)
        self.host, self.auth = host, auth
        self.buf = b""

    def put(self, path, body):
        data = json.dumps(body).encode()
        auth = f"Authorization: {self.auth}\r\n" if self.auth else ""
        self.sock.sendall(f"PUT {path} HTTP/1.1\r\nHost: {self.host}\r\n{auth}"
                          f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
                          .encode() + data)
        kernel = now = None
        while True:
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end >= 0:
                head = self.buf[:head_end].decode("latin-1")
                length = re.search(r"(?im)^content-length:\s*(\d+)", head)
                if not length:
                    raise RuntimeError("a PUT answer without Content-Length: " + head)
                total = head_end + 4 + int(length.group(1))
                if len(self.buf) >= total:
                    self.buf = self.buf[total:]
                    return int(head.split(" ", 2)[1]), kernel or now, now
            chunk, kernel, now = stamped_recv(self.sock)
            if not chunk:
                raise RuntimeError("the server closed a writer's connection")
            self.buf += chunk


def ack_latency(base, feeds, writes, interval_ms):
    """Open-loop PUTs, each acknowledged at the writer's socket, and the feeds' receipt of each.

    Both ends are the kernel's receive times (SO_TIMESTAMPNS): when the PUT's answer reached the
    writer's socket and when the row reached each feed's socket, so neither includes this
    client's own time to get to the bytes (Python needs 20-30 us a row; the last of 200 feeds
    would wait for the other 199). The time the client read each row is reported too."""
    host, port = base.split("//")[1].split(":")
    port = int(port)
    auth = os.environ.get("BENCH_AUTH_HEADER", "")
    fresh_db(base, "benchack")
    sel = selectors.DefaultSelector()
    conns = []
    path = "/benchack/_changes?feed=continuous&since=now&heartbeat=30000"
    auth_line = f"Authorization: {auth}\r\n" if auth else ""
    for i in range(feeds):
        s = stamped_socket(host, port)
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{auth_line}\r\n".encode())
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, i)
        conns.append(s)
    arrived, read_at = {}, {}
    stop = threading.Event()

    def read_feeds():
        # The chunked framing is not parsed: rows are whole lines, and chunk sizes are lines of
        # their own that do not start with {"seq".
        pending = [b""] * feeds
        while not stop.is_set():
            for key, _ in sel.select(0.05):
                i = key.data
                try:
                    data, kernel, now = stamped_recv(key.fileobj)
                except BlockingIOError:
                    continue
                if not data:
                    sel.unregister(key.fileobj)
                    continue
                lines = (pending[i] + data).split(b"\n")
                pending[i] = lines.pop()
                for line in lines:
                    at = line.find(b'"id":"')
                    if line.startswith(b'{"seq"') and at >= 0:
                        doc_id = line[at + 6:line.index(b'"', at + 6)].decode()
                        arrived.setdefault((i, doc_id), kernel or now)
                        read_at.setdefault((i, doc_id), now)

    reader = threading.Thread(target=read_feeds)
    reader.start()
    time.sleep(1.0)
    acks = {}
    failed = 0
    lock = threading.Lock()
    writer_pool = queue.Queue()
    for _ in range(8):
        writer_pool.put(StampedWriter(host, port, auth))

    def write(n):
        nonlocal failed
        w = writer_pool.get()
        try:
            status, kernel, _ = w.put(f"/benchack/w{n}", {"n": n})
        finally:
            writer_pool.put(w)
        with lock:
            if status == 201:
                acks[f"w{n}"] = kernel
            else:
                failed += 1

    from concurrent.futures import ThreadPoolExecutor
    start = time.time()
    with ThreadPoolExecutor(8) as pool:
        futures = []
        for n in range(writes):
            delay = start + n * interval_ms / 1000 - time.time()
            if delay > 0:
                time.sleep(delay)
            futures.append(pool.submit(write, n))
        for f in futures:
            f.result()
    deadline = time.time() + 10
    while len(arrived) < feeds * len(acks) and time.time() < deadline:
        time.sleep(0.01)
    stop.set()
    reader.join()
    for s in conns:
        s.close()

    def spread(seen):
        # A row can arrive before its PUT's answer does: that counts as 0.
        lat = sorted(max(0.0, (seen[(i, d)] - t) * 1000) for d, t in acks.items()
                     for i in range(feeds) if (i, d) in seen)
        q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))]
        return len(lat), f"p50 {q(0.50):.2f} ms  p99 {q(0.99):.2f} ms  max {lat[-1]:.2f} ms"

    delivered, arrival = spread(arrived)
    _, receipt = spread(read_at)
    print(f"ack   {feeds} continuous feeds, {writes} PUTs open-loop every {interval_ms} ms: ack -> feed "
          f"{arrival}  undelivered {feeds * len(acks) - delivered}  failed writes {failed}")
    print(f"      read by this client: {receipt}")


def proc_sample(pid):
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS"))
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime + stime
    return rss, ticks / os.sysconf("SC_CLK_TCK")


async def idle(base, pid, feeds, seconds):
    host, port = base.split("//")[1].split(":")
    fresh_db(base, "benchidle")
    rss0, cpu0 = proc_sample(pid)
    conns = []
    for i in range(feeds):
        conns.append(await open_feed(host, int(port), "/benchidle/_changes?feed=continuous&since=now&heartbeat=30000"))
    rss1, cpu1 = proc_sample(pid)
    t0 = time.time()
    await asyncio.sleep(seconds)
    rss2, cpu2 = proc_sample(pid)
    print(f"idle: {feeds} continuous feeds (heartbeat 30 s)")
    print(f"  RSS before {rss0/1024:.1f} MiB, with feeds {rss1/1024:.1f} MiB, after {seconds}s {rss2/1024:.1f} MiB")
    print(f"  server CPU while idle: {cpu2 - cpu1:.2f} s over {time.time() - t0:.0f} s "
          f"({100 * (cpu2 - cpu1) / seconds:.2f}% of one core)")
    for _, w in conns:
        w.close()


def shards(base, docs, shard_count):
    fresh_db(base, "benchshards")
    status, body = http(base, "PUT", "/benchshards/_changes/_meta", {"shards": shard_count})
    assert status == 200, body
    batch = [{"n": i, "note": "x" * 100} for i in range(1000)]
    t0 = time.perf_counter()
    for _ in range(docs // 1000):
        http(base, "POST", "/benchshards/_bulk_docs", {"docs": batch})
    print(f"shards: loaded {docs} docs in {time.perf_counter() - t0:.1f} s")

    def count(path):
        with urllib.request.urlopen(base + path) as r:
            return len(json.loads(r.read())["results"])

    t0 = time.perf_counter()
    n = count("/benchshards/_changes")
    t1 = time.perf_counter()
    print(f"  one consumer on /_changes: {n} rows in {t1 - t0:.2f} s = {n / (t1 - t0):,.0f} rows/s")
    from concurrent.futures import ThreadPoolExecutor
    ids = body["shards"]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(ids)) as pool:
        counts = list(pool.map(lambda s: count(f"/benchshards/_changes/{s}"), ids))
    t1 = time.perf_counter()
    total = sum(counts)
    print(f"  {len(ids)} consumers on shard feeds {counts}: {total} rows in {t1 - t0:.2f} s = "
          f"{total / (t1 - t0):,.0f} rows/s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["latency", "ack", "idle", "shards"])
    ap.add_argument("base")
    ap.add_argument("--feeds", type=int)
    ap.add_argument("--writes", type=int)
    ap.add_argument("--interval-ms", type=float, default=10)
    ap.add_argument("--pid", type=int)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--shards", type=int, default=4)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if a.mode == "latency":
        asyncio.run(latency(a.base, a.feeds or 1000, a.writes or 200))
    elif a.mode == "ack":
        ack_latency(a.base, a.feeds or 200, a.writes or 500, a.interval_ms)
    elif a.mode == "idle":
        asyncio.run(idle(a.base, a.pid, a.feeds or 10000, a.seconds))
    else:
        shards(a.base, a.docs, a.shards)


if __name__ == "__main__":
    main()
