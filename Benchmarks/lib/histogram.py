"""Reads Prometheus text from stdin (several nodes' /metrics concatenated) and prints the quantiles of one histogram
summed over them: python3 histogram.py NAME 0.5 0.99 -> "p50 1.2 ms, p99 4.5 ms (N observations)"."""
import re
import sys

name, quantiles = sys.argv[1], [float(q) for q in sys.argv[2:]]
counts = {}
for line in sys.stdin:
    m = re.match(re.escape(name) + r'_bucket\{(?:[^}]*,)?le="([^"]+)"[^}]*\} (\S+)', line)
    if m:
        le = float("inf") if m.group(1) == "+Inf" else float(m.group(1))
        counts[le] = counts.get(le, 0.0) + float(m.group(2))
buckets = sorted(counts.items())
total = buckets[-1][1] if buckets else 0
def quantile(p):
    want, lower, below = p * total, 0.0, 0.0
    for le, n in buckets:
        if n >= want:
            return lower if le == float("inf") else lower + (le - lower) * (want - below) / max(n - below, 1)
        lower, below = le, n
    return lower
print(", ".join("p%g %.1f ms" % (q * 100, quantile(q) * 1000) for q in quantiles) + " (%d observations)" % total)
