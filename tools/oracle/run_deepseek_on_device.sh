#!/usr/bin/env bash
# Runs on the GPU host (device tool): makes the tiny DeepSeek-V3 checkpoints with the carried static moeserve binary
# and writes transformers' reference logits into $OUT. Copy $OUT/deepseek_v3_logits.{json,bin} and
# $OUT/deepseek_v3_oracle.log to tests/fixtures/oracle/.
#   here first: scripts/setup.sh (it writes build/deepseek-r1-tokenizer) and scripts/build_static.sh
#   carry: build-static and build/deepseek-r1-tokenizer (make-tiny copies the tokenizer into the real-vocabulary model)
set -euo pipefail
bin=build-static/moeserve
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=16 MOESERVE_DEEPSEEK_TOKENIZER=$PWD/build/deepseek-r1-tokenizer
$bin make-tiny --family deepseek-v3 --out /tmp/deepseek-tiny
$bin make-tiny --family deepseek-v3 --vocab 1024 --out /tmp/deepseek-tiny-small-vocab
python3 tools/oracle/deepseek_v3_logits.py --out "$OUT" \
  --model "tiny=/tmp/deepseek-tiny=" \
  --model "tiny-small-vocab=/tmp/deepseek-tiny-small-vocab=--vocab 1024" 2>&1 | tee "$OUT/deepseek_v3_oracle.log"
