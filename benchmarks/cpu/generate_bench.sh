#!/usr/bin/env bash
# CPU runner throughput: prefill and decode tokens/s and peak RSS of `moeserve generate`, on the tiny model and on
# a gpt-oss-20b-shaped random checkpoint. Prompts are fresh random token ids on every run.
#   benchmarks/cpu/generate_bench.sh [MODEL_ROOT]   (MODEL_ROOT default /tmp/moeserve-bench; the 20b file is ~14 GB)
# MOESERVE: the binary (default build/moeserve); THREADS: the runner's threads (default: one per hardware thread).
# Needs /usr/bin/time (Debian package time) for the peak RSS.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${MOESERVE:-build/moeserve}
root=${1:-/tmp/moeserve-bench}
mkdir -p "$root"
[ -f "$root/tiny/config.json" ] || $bin make-tiny --out "$root/tiny" >/dev/null
if [ ! -f "$root/gpt-oss-20b/config.json" ]; then
  /usr/bin/time -f "make-tiny --shape gpt-oss-20b: %e s" $bin make-tiny --shape gpt-oss-20b --out "$root/gpt-oss-20b" >/dev/null
fi
random_prompt() { shuf -i 0-199997 -n "$1" -r | paste -sd, -; }

echo "machine: $(nproc) cores usable (threads ${THREADS:-all}), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u +%F)"
printf "%-12s %8s %8s %14s %14s %10s\n" model prompt decode "prefill tok/s" "decode tok/s" "peak RSS"
for model in tiny gpt-oss-20b; do
  case $model in tiny) prompt=512; decode=128 ;; *) prompt=128; decode=16 ;; esac
  out=$( { /usr/bin/time -f "RSS %M" $bin generate --model "$root/$model" --tokens "$(random_prompt $prompt)" \
           --max-tokens $decode --ignore-eos --temperature 1 --seed $RANDOM ${THREADS:+--threads $THREADS} >/dev/null; } 2>&1 )
  prefill=$(grep -o 'prefill [0-9]* tokens in [0-9.]* s ([0-9.]* tok/s)' <<<"$out" | grep -o '([0-9.]*' | tr -d '(')
  dec=$(grep -o 'decode [0-9]* tokens in [0-9.]* s ([0-9.]* tok/s)' <<<"$out" | grep -o '([0-9.]*' | tr -d '(')
  rss=$(grep -o 'RSS [0-9]*' <<<"$out" | awk '{printf "%.2f GiB", $2/1048576}')
  printf "%-12s %8s %8s %14s %14s %10s\n" $model $prompt $decode "$prefill" "$dec" "$rss"
done
