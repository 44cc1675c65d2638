"""The soak's clients (Benchmarks/soak.sh): a legitimate caller timing its API calls, and the hostile streams, each in
its own process (so that one's work does not delay another's clock), all running until the send being watched has an
outcome for every delivery. Prints one JSON object: the send's counts, the server's peak memory, each stream's
statuses, the legitimate calls' latencies."""

import http.client
import json
import multiprocessing
import os
import random
import socket
import sys
import threading
import time
import urllib.parse


def connect(base):
    u = urllib.parse.urlsplit(base)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=30)


class Caller:
    """One keep-alive connection; reconnects when the server closes it."""

    def __init__(self, base):
        self.base = base
        self.conn = connect(base)

    def call(self, method, path, body=None, headers=None):
        for attempt in range(2):
            try:
                self.conn.request(method, path, body=body, headers=headers or {})
                r = self.conn.getresponse()
                data = r.read()
                if r.getheader("connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = connect(self.base)
                return r.status, data
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = connect(self.base)
                if attempt == 1:
                    return "error", b""


def count(statuses, status):
    statuses[str(status)] = statuses.get(str(status), 0) + 1


def run_threads(n, body, stop):
    statuses, lock = {}, threading.Lock()

    def loop(i):
        mine = {}
        while not stop.is_set():
            body(i, mine)
        with lock:
            for k, v in mine.items():
                statuses[k] = statuses.get(k, 0) + v

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return statuses


def receipt_flood(cfg, stop, out):
    """Reports of about 15 KB, each with its own made-up skip reasons, to the send's own receipt addresses, over and over."""
    tokens = cfg["receipts"]
    callers = {}

    def body(i, mine):
        c = callers.setdefault(i, Caller(cfg["base"]))
        skipped = [
            {"url": "https://cdn.example.com/%d.jpg" % j, "reason": "made-up-%016x" % random.getrandbits(64),
             "message": "x" * 150}
            for j in range(64)
        ]
        report = json.dumps({"device": "flood", "report": {"attachments": [], "skipped": skipped}})
        status, _ = c.call("POST", "/v1/receipts/" + random.choice(tokens), report,
                           {"Content-Type": "application/json"})
        count(mine, status)

    out.put(("receipt flood", run_threads(cfg["threads"], body, stop)))


def open_flood(cfg, stop, out):
    """Opens and dismissals with made-up actions to the send's own receipt addresses, over and over (one counts per
    delivery, the rest are 409), and to forged addresses (403)."""
    tokens = cfg["receipts"]
    callers = {}

    def body(i, mine):
        c = callers.setdefault(i, Caller(cfg["base"]))
        if random.random() < 0.2:
            token = "%s.zzzzzzz.%013d.%s" % (cfg["notification"], random.getrandbits(40), "A" * 22)
        else:
            token = random.choice(tokens)
        event = random.choice(["opened", "dismissed"])
        doc = {"event": event}
        if event == "opened" and random.random() < 0.5:
            doc["action"] = "made-up-%016x" % random.getrandbits(64)
        status, _ = c.call("POST", "/v1/receipts/" + token + "/opens", json.dumps(doc), {"Content-Type": "application/json"})
        count(mine, status)

    out.put(("open flood", run_threads(cfg["threads"], body, stop)))


def live_views(cfg, stop, out):
    """Streams of the send's events held open for the whole soak (as many browsers watching it), each read to the
    end and opened again when it ends; counts the events each got."""

    def body(i, mine):
        u = urllib.parse.urlsplit(cfg["base"])
        # Longer than the 15 s between keep-alive lines: a read that times out leaves http.client unusable.
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        try:
            conn.request("GET", "/v1/apps/%s/notifications/%s/events?seconds=60" % (cfg["app"], cfg["notification"]),
                         headers={"Authorization": "Bearer " + cfg["read_key"]})
            r = conn.getresponse()
            count(mine, r.status)
            while not stop.is_set():
                try:
                    line = r.fp.readline()
                except socket.timeout:
                    continue
                if not line:
                    break
                if line.startswith(b"event: insight"):
                    count(mine, "events")
        except (http.client.HTTPException, OSError):
            count(mine, "error")
        finally:
            conn.close()

    out.put(("live views", run_threads(cfg["threads"], body, stop)))


def pipelined_media(cfg, stop, out):
    """`GET /health/live` and `GET` of a large video in one write, read to the last byte, again and again."""
    u = urllib.parse.urlsplit(cfg["base"])
    path = urllib.parse.urlsplit(cfg["big_media"]).path
    request = ("GET /health/live HTTP/1.1\r\nHost: s\r\n\r\nGET %s HTTP/1.1\r\nHost: s\r\n\r\n" % path).encode()
    moved = [0]

    def body(i, mine):
        try:
            with socket.create_connection((u.hostname, u.port), timeout=30) as s:
                while not stop.is_set():
                    s.sendall(request)
                    buf = b""
                    for _ in range(2):
                        while b"\r\n\r\n" not in buf:
                            chunk = s.recv(1 << 16)
                            if not chunk:
                                raise EOFError
                            buf += chunk
                        head, buf = buf.split(b"\r\n\r\n", 1)
                        lines = head.decode("latin-1").split("\r\n")
                        count(mine, lines[0].split(" ")[1])
                        length = 0
                        for line in lines[1:]:
                            k, _, v = line.partition(":")
                            if k.lower() == "content-length":
                                length = int(v)
                        take = min(len(buf), length)
                        buf, left = buf[take:], length - take
                        while left:
                            chunk = s.recv(min(left, 1 << 20))
                            if not chunk:
                                raise EOFError
                            left -= len(chunk)
                        moved[0] += length
        except (OSError, EOFError):
            count(mine, "closed")

    statuses = run_threads(cfg["threads"], body, stop)
    statuses["bytes read"] = moved[0]
    out.put(("pipelined large media", statuses))


def random_bearers(cfg, stop, out):
    """Made-up keys, a new one each request, on kept-alive connections."""
    callers = {}

    def body(i, mine):
        c = callers.setdefault(i, Caller(cfg["base"]))
        status, _ = c.call("GET", "/v1/apps/" + cfg["app"],
                           headers={"Authorization": "Bearer rp_%032x" % random.getrandbits(128)})
        count(mine, status)

    out.put(("random bearers", run_threads(cfg["threads"], body, stop)))


def heavy_reads(cfg, stop, out):
    """A read key asking for the most expensive pages: device searches and pages, listings, the send's outcomes."""
    callers = {}
    app = cfg["app"]
    paths = [
        lambda: "/v1/apps/%s/devices?limit=100&q=%x" % (app, random.getrandbits(12)),
        lambda: "/v1/apps/%s/devices?limit=100&after=%d" % (app, random.randrange(100000)),
        lambda: "/v1/apps/%s/notifications?limit=100" % app,
        lambda: "/v1/apps/%s/notifications/%s?limit=1000&after=%d" % (app, cfg["notification"],
                                                                     random.randrange(100000)),
        lambda: "/v1/apps/%s/notifications/%s?limit=1" % (app, cfg["notification"]),
    ]

    def body(i, mine):
        c = callers.setdefault(i, Caller(cfg["base"]))
        status, _ = c.call("GET", random.choice(paths)(), headers={"Authorization": "Bearer " + cfg["read_key"]})
        count(mine, status)

    out.put(("heavy read-scope queries", run_threads(cfg["threads"], body, stop)))


def legitimate(cfg, stop, out):
    """What an operator does during a send: the console's look at the send, a dry run, the app, five times a second."""
    c = Caller(cfg["base"])
    auth = {"Authorization": "Bearer " + cfg["key"], "Content-Type": "application/json"}
    calls = [
        ("GET", "/v1/apps/%s/notifications/%s?limit=1" % (cfg["app"], cfg["notification"]), None),
        ("POST", "/v1/apps/%s/notifications" % cfg["app"],
         json.dumps({"title": "Check", "body": "dry run", "audience": {"all": True}, "dry_run": True})),
        ("GET", "/v1/apps/%s" % cfg["app"], None),
    ]
    latencies, statuses = [], {}
    while not stop.is_set():
        for method, path, body in calls:
            t = time.monotonic()
            status, _ = c.call(method, path, body, auth)
            latencies.append((time.monotonic() - t) * 1000)
            count(statuses, status)
        stop.wait(0.2)
    latencies.sort()

    def pct(p):
        return round(latencies[min(len(latencies) - 1, int(len(latencies) * p))], 1) if latencies else None

    out.put(("legitimate", {"statuses": statuses, "calls": len(latencies), "p50_ms": pct(0.5), "p99_ms": pct(0.99),
                            "max_ms": round(latencies[-1], 1) if latencies else None}))


def hanging_push_service(cfg, stop, out):
    """The second app sends to its 1,000 web subscriptions, all at a push service that never answers, every 10 s."""
    c = Caller(cfg["base"])
    auth = {"Authorization": "Bearer " + cfg["flood_key"], "Content-Type": "application/json"}
    statuses = {}
    while not stop.is_set():
        status, _ = c.call("POST", "/v1/apps/%s/notifications" % cfg["flood_app"],
                           json.dumps({"title": "Never answered", "audience": {"all": True}}), auth)
        count(statuses, status)
        stop.wait(10)
    out.put(("hanging push service", statuses))


def other_app(cfg, stop, out):
    """A third app's one-device send every second, timed from the API call to the APNs emulator's receipt."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from one_device import percentile, timed_sends
    r = timed_sends(cfg["base"], cfg["other_app"], cfg["other_key"], cfg["sandbox_admin"], stop, tag="soak", patience=60)
    lat = r["latencies_ms"]
    out.put(("other app", {"sends": r["sends"], "statuses": r["statuses"], "received": len(lat), "lost": r["lost"],
                           "p50_ms": percentile(lat, 0.5), "p99_ms": percentile(lat, 0.99),
                           "max_ms": round(lat[-1], 1) if lat else None}))


def public_flood(cfg, stop, out):
    """The app's public key (the one every page ships) registering new devices at the longest fields, each request
    from another visitor (X-Forwarded-For through the trusted proxy): the worst a page's key can do to the disk and
    the database. Counts the answers, and the registrations stored."""
    callers = {}

    def longest(n, k):
        return ["%08x%02x" % (n % (1 << 32), j) + "x" * 54 for j in range(k)]

    def body(i, mine):
        c = callers.setdefault(i, Caller(cfg["base"]))
        n = random.getrandbits(64)
        device = {"token": ("%064x" % n) * 3 + "ab" * 4, "platform": "ios", "tags": longest(n, 32),
                  "topics": longest(n + 1, 32), "locale": "x" * 35, "time_zone": "y" * 64, "app_version": "z" * 64}
        visitor = "%d.%d.%d.%d" % (random.randrange(1, 224), random.randrange(256), random.randrange(256),
                                   random.randrange(1, 255))
        status, data = c.call("POST", "/v1/apps/%s/devices" % cfg["app"], json.dumps(device),
                              {"Authorization": "Bearer " + cfg["public_key"], "Content-Type": "application/json",
                               "X-Forwarded-For": visitor})
        count(mine, status)
        if status == 429:
            stop.wait(0.05)

    out.put(("public-key flood", run_threads(cfg["threads"], body, stop)))


def stream_holder(cfg, stop, out):
    """Another app's read key opening as many live views as it can (one each of its threads) and holding them: it
    gets its app's share, and the send's own watchers theirs."""

    def body(i, mine):
        u = urllib.parse.urlsplit(cfg["base"])
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        try:
            conn.request("GET", "/v1/apps/%s/notifications/%s/events?seconds=300" % (cfg["flood_app"],
                                                                                    cfg["flood_notification"]),
                         headers={"Authorization": "Bearer " + cfg["flood_read_key"]})
            r = conn.getresponse()
            count(mine, r.status)
            if r.status != 200:
                r.read()
                stop.wait(2)
                return
            while not stop.is_set():
                try:
                    if not r.fp.readline():
                        break
                except socket.timeout:
                    continue
        except (http.client.HTTPException, OSError):
            count(mine, "error")
        finally:
            conn.close()

    out.put(("stream holder", run_threads(cfg["threads"], body, stop)))


def kb(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def main():
    cfg = json.load(open(sys.argv[1]))
    stop = multiprocessing.Event()
    out = multiprocessing.Queue()
    streams = [receipt_flood, open_flood, live_views, pipelined_media, random_bearers, heavy_reads, legitimate,
               hanging_push_service, other_app, public_flood, stream_holder]
    procs = [multiprocessing.Process(target=f, args=(dict(cfg, threads=cfg["threads"].get(f.__name__, 1)), stop, out))
             for f in streams]
    for p in procs:
        p.start()
    watcher = Caller(cfg["base"])
    auth = {"Authorization": "Bearer " + cfg["key"]}
    start = time.monotonic()
    counts, total, rss_max = {}, cfg["devices"], 0
    while time.monotonic() - start < cfg["timeout"]:
        status, data = watcher.call("GET", "/v1/apps/%s/notifications/%s?limit=1" % (cfg["app"], cfg["notification"]),
                                    headers=auth)
        if status == 200:
            doc = json.loads(data)
            counts, total = doc.get("counts", {}), doc.get("total", total)
            ended = sum(v for k, v in counts.items() if k not in ("queued", "leased"))
            if total >= cfg["devices"] and ended >= total:
                break
        rss_max = max(rss_max, kb(cfg["pid"], "VmRSS"))
        time.sleep(1)
    elapsed = time.monotonic() - start
    stop.set()
    results = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    ended = sum(v for k, v in counts.items() if k not in ("queued", "leased"))
    print(json.dumps({
        "send": {"devices": cfg["devices"], "total": total, "counts": counts, "lost": cfg["devices"] - ended,
                 "seconds": round(elapsed, 1)},
        "server_peak_rss_mb": round(kb(cfg["pid"], "VmHWM") / 1024, 1),
        "streams": results,
    }, indent=1))


if __name__ == "__main__":
    main()
