"""The fairness benchmark's clients (Benchmarks/fairness.sh): app A's send is under way; app B sends to one device
every second until A's last delivery, each timed from the API call to the emulator's receipt. Prints one JSON
object: B's sends and latencies, A's deliveries and their rate."""

import json
import re
import sys
import threading
import time
import urllib.request

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from one_device import percentile, timed_sends  # noqa: E402


def delivered(base):
    text = urllib.request.urlopen(base + "/metrics", timeout=60).read().decode()
    m = re.search(r'^richpush_queue_deliveries\{state="delivered"\} ([0-9.e+]+)', text, re.M)
    return int(float(m.group(1))) if m else 0


def main():
    cfg = json.load(open(sys.argv[1]))
    stop = threading.Event()
    result = {}
    b = threading.Thread(target=lambda: result.update(timed_sends(cfg["base"], cfg["app_b"], cfg["key_b"],
                                                                  cfg["sandbox_admin"], stop, tag="fair")))
    start = time.monotonic()
    b.start()
    n = 0
    # Every two seconds: each look at /metrics counts the queue by state, which the node pays for.
    while time.monotonic() - start < cfg["timeout"]:
        n = delivered(cfg["base"])
        if n >= cfg["devices"]:
            break
        time.sleep(2)
    elapsed = time.monotonic() - start
    stop.set()
    b.join()
    lat = result.get("latencies_ms", [])
    print(json.dumps({
        "a": {"devices": cfg["devices"], "delivered": n, "seconds": round(elapsed, 1),
              "per_second": round(n / elapsed) if elapsed else 0},
        "b": {"sends": result.get("sends"), "statuses": result.get("statuses"), "received": len(lat),
              "lost": result.get("lost"), "p50_ms": percentile(lat, 0.5), "p99_ms": percentile(lat, 0.99),
              "max_ms": round(lat[-1], 1) if lat else None},
    }, indent=1))


if __name__ == "__main__":
    main()
