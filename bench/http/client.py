"""What the Python HTTP benchmarks share: requests to one server (Chaise or CouchDB alike), with
BENCH_AUTH (user:password) as Basic authentication, and quantiles of timings."""
import base64, json, os, urllib.request


class Client:
    def __init__(self, base):
        self.base = base.rstrip("/")
        self.headers = {"Content-Type": "application/json"}
        if os.environ.get("BENCH_AUTH"):
            auth = base64.b64encode(os.environ["BENCH_AUTH"].encode()).decode()
            self.headers["Authorization"] = "Basic " + auth

    def raw(self, method, path, body=None, timeout=120):
        data = json.dumps(body).encode() if body is not None else None
        r = urllib.request.Request(self.base + path, data=data, method=method, headers=self.headers)
        return urllib.request.urlopen(r, timeout=timeout).read()

    def req(self, method, path, body=None):
        return json.loads(self.raw(method, path, body))


def quantile(ms, q):
    ms = sorted(ms)
    return ms[min(len(ms) - 1, int(len(ms) * q))]
