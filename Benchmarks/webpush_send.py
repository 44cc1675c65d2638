"""The peer of `richpush-bench webpush-send`: pywebpush sending to the same push service emulator, THREADS threads,
for COUNT pushes: each thread with a kept requests.Session ("session": true, connections reused, pywebpush's best
case), or calling webpush() as its documentation shows, a new connection each time ("session": false). Reads
{"subscriptions": [...], "key": "<raw base64url>", "ca": path, "payload": "...", "count": n, "threads": t,
"session": bool} on stdin; prints JSON: sends per second, statuses, CPU seconds of this process."""
import json, os, sys, threading, time
import requests
from pywebpush import webpush

d = json.load(sys.stdin)
subs, count, threads = d["subscriptions"], d["count"], d["threads"]
statuses, lock, next_index = {}, threading.Lock(), [0]

def session():
    s = requests.Session()
    s.verify = d["ca"]
    s.trust_env = False  # the environment's CA bundle would replace the sandbox's CA
    return s

def work():
    kept = session() if d["session"] else None
    while True:
        with lock:
            i = next_index[0]
            if i >= count: return
            next_index[0] += 1
        try:
            r = webpush(subscription_info=subs[i % len(subs)], data=d["payload"], vapid_private_key=d["key"],
                        vapid_claims={"sub": "mailto:bench@example.com"}, ttl=600, requests_session=kept or session())
            code = str(r.status_code)
        except Exception as e:
            code = getattr(getattr(e, "response", None), "status_code", None) or type(e).__name__
        with lock:
            statuses[str(code)] = statuses.get(str(code), 0) + 1

cpu0, t0 = time.process_time(), time.perf_counter()
ts = [threading.Thread(target=work) for _ in range(threads)]
for t in ts: t.start()
for t in ts: t.join()
elapsed = time.perf_counter() - t0
print(json.dumps({"per_second": count / elapsed, "elapsed": elapsed, "statuses": statuses,
                  "cpu_s": time.process_time() - cpu0}))
