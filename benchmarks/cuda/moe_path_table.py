#!/usr/bin/env python3
"""The MoE path table a moe_bench run implies, as moeserve's --moe-path-table takes it.

Usage: moe_path_table.py MOE_BENCH.json [ROUTING]

For every measured rows-per-expert point of ROUTING (default uniform) it takes the fastest correct path (both
projections); consecutive points with the same winner merge, and the bound between two winners is the geometric
mean of the two points (the measurements are at 1, 2, 4, ... rows, so the midpoint on a log scale). The reference
path is never chosen. Prints "PATH:MAX,...,PATH".
"""
import json
import math
import sys


def table(results, routing):
    best = {}
    for r in results:
        if r["routing"] != routing or not r["correct"] or r["path"] == "reference":
            continue
        us = r["mlp1_us"] + r["mlp2_us"]
        point = r["rows_per_expert"]
        if point not in best or us < best[point][1]:
            best[point] = (r["path"], us)
    if not best:
        raise SystemExit(f"moe_path_table: no correct {routing} results")
    points = sorted(best)
    rules = []
    for i, point in enumerate(points):
        path = best[point][0]
        if rules and rules[-1][0] == path:
            continue
        if rules:
            bound = math.sqrt(points[i - 1] * point)
            rules[-1] = (rules[-1][0], bound)
        rules.append((path, None))
    return ",".join(p if b is None else f"{p}:{b:.3g}" for p, b in rules)


def main():
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    with open(sys.argv[1]) as f:
        data = json.load(f)
    print(table(data["results"], sys.argv[2] if len(sys.argv) == 3 else "uniform"))


if __name__ == "__main__":
    main()
