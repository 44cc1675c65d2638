#!/usr/bin/env python3
"""The peer for `richpush-bench chart`: the same chart drawn with matplotlib's Agg backend.

Reads the values from argv[1] (a JSON file: {"values": [...], "width": pt, "height": pt, "scale": n,
"runs": n}) and prints one JSON line: median and minimum milliseconds per PNG, and the PNG size.
"""
import io, json, sys, time
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

cfg = json.load(open(sys.argv[1]))
values = cfg["values"]
w_in, h_in = cfg["width"] / 72, cfg["height"] / 72
dpi = 72 * cfg["scale"]

def render():
    fig = plt.figure(figsize=(w_in, h_in), dpi=dpi)
    ax = fig.add_axes([0.05, 0.1, 0.82, 0.62])
    fig.text(0.05, 0.93, cfg.get("title", ""), fontsize=12, color="#6C6C70")
    fig.text(0.05, 0.82, cfg.get("value", ""), fontsize=22, weight="bold")
    fig.text(0.45, 0.82, cfg.get("change", ""), fontsize=13, color="#1F9D4A", weight="bold")
    ax.plot(range(len(values)), values, color="#1F9D4A", linewidth=2, solid_capstyle="round", solid_joinstyle="round")
    ax.grid(axis="y", color="#E3E3E8")
    ax.yaxis.tick_right()
    for s in ax.spines.values():
        s.set_visible(False)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    return buf.getvalue()

render()  # warm-up: font cache, imports
times = []
png = b""
for _ in range(cfg["runs"]):
    t = time.perf_counter()
    png = render()
    times.append((time.perf_counter() - t) * 1000)
times.sort()
print(json.dumps({"median_ms": times[len(times) // 2], "min_ms": times[0], "png_bytes": len(png)}))
