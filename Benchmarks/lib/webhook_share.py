#!/usr/bin/env python3
"""What a node spends on webhooks, from a profile of one run: the share of its samples in webhook code.

    python3 Benchmarks/lib/webhook_share.py WITH.perf [WITHOUT.perf]

WITH.perf is `perf record --call-graph dwarf` of a node delivering with webhooks on (`WEBHOOKS=1
PERF_OUT=WITH.perf PERF_SECONDS=45 PERF_CALLGRAPH="--call-graph dwarf,8192" Benchmarks/delivery.sh 150000`). A sample
is the webhooks' when a frame of its stack is the sender's, its store's, its batches', its client's or the settle's
event writer; the webhook client's connections run on the shared event loop group (threads `NIO-SGLTN-*`), whose
samples are counted beside (with WITHOUT.perf, a run without webhooks, that count is given for both).

The share is taken within one run, so that it does not move with the machine's speed between two runs (on a shared
host, CPU seconds per 1,000 deliveries moved by 20 % between two runs of the same build). Webhook work the stacks do
not show (more pages for the WAL checkpointer to copy, a busier writer) is not in it.
"""

import re
import subprocess
import sys

WEBHOOK = re.compile(
    r"WebhookSender|WebhookBatch|SQLiteWebhookStore|PostgresWebhookStore|WebhookClient|WebhookSigner"
    r"|SQLiteDeliveryQueueC11writeEvents"
)


def samples(path):
    """(thread name, frames leaf first) of each sample."""
    text = subprocess.run(
        ["perf", "script", "-i", path, "-F", "comm,tid,ip,sym", "--no-demangle"],
        capture_output=True,
        text=True,
        errors="replace",
        check=True,
    ).stdout
    out, comm, frames = [], None, None
    for line in text.splitlines():
        if not line.strip():
            if frames is not None:
                out.append((comm, frames))
            comm, frames = None, None
        elif not line[0].isspace():
            if frames is not None:
                out.append((comm, frames))
            comm, frames = line.split()[0], []
        elif frames is not None:
            parts = line.strip().split(None, 1)
            frames.append(parts[1] if len(parts) > 1 else "?")
    if frames is not None:
        out.append((comm, frames))
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    runs = [samples(p) for p in sys.argv[1:3]]
    with_ = runs[0]
    hooks = sum(1 for _, f in with_ if any(WEBHOOK.search(x) for x in f))
    loop = [sum(1 for c, _ in run if c.startswith("NIO-SGLTN")) for run in runs]
    total = len(with_)
    print(
        "webhook code: %d of %d samples = %.1f %% of the node's CPU; %.1f %% added to the rest"
        % (hooks, total, 100 * hooks / total, 100 * hooks / max(total - hooks, 1))
    )
    if len(runs) == 2:
        extra = max(loop[0] - loop[1], 0)
        print(
            "the shared event loop threads (the webhook client's connections): %d samples with webhooks, %d without"
            " (+%.1f %% of the rest)" % (loop[0], loop[1], 100 * extra / max(total - hooks, 1))
        )
    else:
        print("the shared event loop threads (the webhook client's connections): %d samples" % loop[0])


if __name__ == "__main__":
    main()
