#!/usr/bin/env bash
# The highest Server target_qps that stays VALID at the MLPerf shape on one H200 (issue 13, item 7): `moeserve
# bench --scenario server` with the slo scheduler on the synthetic gpt-oss-120b, probed upward from QPS_START by
# QPS_STEP while VALID, then bisected between the last VALID and the first INVALID rate for BISECT rounds. Each
# probe is a short LoadGen run: MIN_DURATION seconds of arrivals from a performance set of SET_SIZE samples (equal
# issue pads a run to whole permutations of the set, so SET_SIZE stays small enough that the padding does not
# stretch the run); a run also lasts until its last requests finish (at this shape about a minute of decoding).
# Results: $OUT/server.tar.gz (each probe's moeserve_result.json and summary) and a table printed last.
#   QPS_START (0.5)  QPS_STEP (1.25)  BISECT (1)  MIN_DURATION (120)  SET_SIZE (64)  ENGINE (extra flags)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/moeserve-server}
BIN=${BIN:-build-cuda-static}
mkdir -p "$OUT/server"
for dir in /usr/local/cuda/lib64 /opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib; do
  [ -d "$dir" ] && export LD_LIBRARY_PATH="$dir:${LD_LIBRARY_PATH:-}"
done

# probe QPS: runs one Server test, prints "VALID" or "INVALID" and appends a row to rows.txt.
probe() {
  local qps=$1 dir="$OUT/server/qps-$1"
  # shellcheck disable=SC2086
  timeout 900 "$BIN/moeserve" bench --synthetic gpt-oss-120b --device cuda --benchmark gpt-oss-120b --scenario server \
    --scheduler slo --dataset synthetic --synthetic-samples "${SET_SIZE:-64}" --synthetic-input normal:5000:2000 \
    --synthetic-output normal:1278:247 --performance-sample-count "${SET_SIZE:-64}" --target-qps "$qps" \
    --min-duration "${MIN_DURATION:-120}" --min-query-count 1 --no-progress --output-dir "$dir" ${ENGINE:-} \
    > "$dir.log" 2>&1
  python3 - "$dir/moeserve_result.json" "$qps" >> "$OUT/server/rows.txt" <<'EOF'
import json, sys
try:
    r = json.load(open(sys.argv[1]))["result"]
    ttft, tpot = r.get("ttft_ns", {}), r.get("tpot_ns", {})
    print(f"| {sys.argv[2]} | {r['validity']} | {r.get('completed_tokens_per_second', r.get('tokens_per_second', 0)):.0f} | {ttft.get('p99', 0) / 1e9:.2f} | "
          f"{tpot.get('p99', 0) / 1e6:.1f} | {'; '.join(r.get('reasons', []))} |")
except (OSError, ValueError, KeyError) as e:
    print(f"| {sys.argv[2]} | no result ({e}) | | | | |")
EOF
  tail -1 "$OUT/server/rows.txt" | grep -q "| VALID |" && echo VALID || echo INVALID
}

lo="" hi="" qps=${QPS_START:-0.5}
while [ -z "$hi" ]; do
  if [ "$(probe "$qps")" = VALID ]; then lo=$qps; qps=$(python3 -c "print(round($qps * ${QPS_STEP:-1.25}, 3))"); else hi=$qps; fi
  [ -z "$lo" ] && [ -n "$hi" ] && break  # the first probe already failed: report it
done
for _ in $(seq "${BISECT:-1}"); do
  [ -z "$lo" ] && break
  mid=$(python3 -c "print(round(($lo + $hi) / 2, 3))")
  if [ "$(probe "$mid")" = VALID ]; then lo=$mid; else hi=$mid; fi
done

tar -czf "$OUT/server.tar.gz" -C "$OUT" server
echo "==== Server search (slo scheduler; MLPerf shape; set of ${SET_SIZE:-64}, min duration ${MIN_DURATION:-120} s)"
echo "| target_qps | validity | tokens/s | p99 TTFT s | p99 TPOT ms | reasons |"
echo "|---|---|---|---|---|---|"
cat "$OUT/server/rows.txt"
echo "highest VALID target_qps: ${lo:-none} (first INVALID: ${hi:-none})"
