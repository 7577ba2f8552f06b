#!/usr/bin/env python3
"""One table row per `moeserve bench` result: tokens/s as LoadGen counts it (output tokens over the longest latency),
and the rate while the batch is full (the mean of the timeline's output-token rate over the bins where at least 95%
of the run's peak concurrency is in flight), which leaves the ramp (prefill of the first wave) and the tail (the
last sequences draining) out. Usage: summarize_offline.py RESULT.json [...]"""
import json
import sys

print("| run | validity | samples | output tokens | tokens/s | full-batch tokens/s | peak in flight | J/token |")
print("|---|---|---|---|---|---|---|---|")
for path in sys.argv[1:]:
    try:
        r = json.load(open(path))
    except (OSError, ValueError) as e:
        print(f"| {path} | unreadable: {e} | | | | | | |")
        continue
    res, tl = r["result"], r.get("timeline", {})
    flight, rate = tl.get("in_flight", []), tl.get("output_tokens_per_second", [])
    peak = max(flight) if flight else 0
    full = [t for f, t in zip(flight, rate) if peak and f >= 0.95 * peak]
    energy = r.get("energy", {})
    jpt = energy.get("joules_per_output_token") if isinstance(energy, dict) else None
    name = path.split("/")[-2] if "/" in path else path
    print(f"| {name} | {res['validity']} | {res['samples']} | {res['output_tokens']} | {res['tokens_per_second']:.0f} | "
          f"{sum(full) / len(full) if full else 0:.0f} | {peak:.0f} | {jpt if jpt is not None else '-'} |")
