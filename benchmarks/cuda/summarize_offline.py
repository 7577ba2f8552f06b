#!/usr/bin/env python3
"""One table row per `moeserve bench` result: tokens/s as LoadGen counts it (output tokens over the longest latency),
the rate while the batch is full (the mean of the timeline's output-token rate over the bins where at least 95%
of the run's peak concurrency is in flight), which leaves the ramp (prefill of the first wave) and the tail (the
last sequences draining) out when the whole set fits one batch, and the steady-state rate of a run with more samples
than the KV pool holds at once: the engine's output rate (its own timeline) over the bins where requests waited while
the pool was at least 95% full, i.e. where new prompts are prefilled as finished sequences free their blocks, as
in a long run (an MLPerf Offline run lasts at least 600 s). Usage: summarize_offline.py RESULT.json [...]"""
import json
import sys

print("| run | validity | samples | output tokens | tokens/s | full-batch tokens/s | peak in flight | KV-bound steady "
      "tokens/s (seconds) | J/token |")
print("|---|---|---|---|---|---|---|---|---|")
for path in sys.argv[1:]:
    try:
        r = json.load(open(path))
    except (OSError, ValueError) as e:
        print(f"| {path} | unreadable: {e} | | | | | | | |")
        continue
    res, tl = r["result"], r.get("timeline", {})
    flight, rate = tl.get("in_flight", []), tl.get("output_tokens_per_second", [])
    peak = max(flight) if flight else 0
    full = [t for f, t in zip(flight, rate) if peak and f >= 0.95 * peak]
    sut = r.get("sut_timeline", {})
    period = sut.get("period_ms", 0) / 1000
    steady = [g for g, w, kv in zip(sut.get("generated_tokens", []), sut.get("waiting", []), sut.get("kv_usage", []))
              if w > 0 and kv >= 0.95]
    steady_text = f"{sum(steady) / (len(steady) * period):.0f} ({len(steady) * period:.0f})" if steady and period else "-"
    energy = r.get("energy", {})
    jpt = energy.get("joules_per_output_token") if isinstance(energy, dict) else None
    name = path.split("/")[-2] if "/" in path else path
    print(f"| {name} | {res['validity']} | {res['samples']} | {res['output_tokens']} | {res['tokens_per_second']:.0f} | "
          f"{sum(full) / len(full) if full else 0:.0f} | {peak:.0f} | {steady_text} | {jpt if jpt is not None else '-'} |")
