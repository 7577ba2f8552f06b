#!/usr/bin/env bash
# Runs on the GPU host (device tool): makes the tiny checkpoints with the carried static moeserve binary and
# writes transformers' reference logits into $OUT. Copy $OUT/oracle_logits.{json,bin} to tests/fixtures/oracle/.
#   build on this machine first: scripts/build_static.sh   (carry: build-static)
set -euo pipefail
bin=build-static/moeserve
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=16
$bin make-tiny --force --out /tmp/tiny
$bin make-tiny --force --vocab 1024 --out /tmp/tiny-small-vocab
python3 tools/oracle/gpt_oss_logits.py --out "$OUT" \
  --model "tiny=/tmp/tiny=" \
  --model "tiny-small-vocab=/tmp/tiny-small-vocab=--vocab 1024" 2>&1 | tee "$OUT/oracle.log"
