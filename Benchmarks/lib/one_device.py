"""Another app's one-device send, timed from the API call to the APNs emulator's receipt: used by fairness.sh and
soak.sh. Each send goes to a token of its own (so its receipt is found by token), each in a thread of its own (a slow
one does not hold back the next), one every `interval` seconds until `stop` is set."""

import http.client
import json
import threading
import time
import urllib.parse


def _call(base, method, path, body=None, key=None):
    u = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    try:
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = "Bearer " + key
        conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
        r = conn.getresponse()
        data = r.read()
        return r.status, (json.loads(data) if data else None)
    except (http.client.HTTPException, OSError):
        return "error", None
    finally:
        conn.close()


def timed_sends(base, app, key, sandbox_admin, stop, interval=1.0, tag="b", patience=120.0):
    """Sends until `stop` is set; returns {"sends", "statuses", "latencies_ms" (sorted), "lost"}. A send whose
    notification the emulator has not received `patience` seconds after its call counts as lost."""
    latencies, statuses, lost, lock = [], {}, [0], threading.Lock()
    threads = []

    def one(i):
        token = "%064x" % (int.from_bytes(tag.encode()[:4].ljust(4, b"\0"), "big") << 200 | i)
        t0 = time.time()
        status, _ = _call(base, "POST", "/v1/apps/%s/notifications" % app,
                          {"title": "One device", "body": "timed %d" % i, "audience": {"apns_tokens": [token]}}, key)
        with lock:
            statuses[str(status)] = statuses.get(str(status), 0) + 1
        if status != 202:
            return
        while time.time() - t0 < patience:
            s, doc = _call(sandbox_admin, "GET", "/apns/notifications?limit=1&token=" + token)
            rows = (doc or {}).get("notifications") or []
            if s == 200 and rows:
                with lock:
                    latencies.append((rows[0]["received_at"] - t0) * 1000)
                return
            time.sleep(0.05 if time.time() - t0 < 2 else 0.25)
        with lock:
            lost[0] += 1

    i = 0
    while not stop.is_set():
        t = threading.Thread(target=one, args=(i,), daemon=True)
        t.start()
        threads.append(t)
        i += 1
        stop.wait(interval)
    for t in threads:
        t.join(timeout=patience + 5)
    latencies.sort()
    return {"sends": i, "statuses": statuses, "latencies_ms": latencies, "lost": lost[0]}


def percentile(sorted_values, p):
    if not sorted_values:
        return None
    return round(sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * p))], 1)
