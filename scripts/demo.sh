#!/usr/bin/env bash
# The main job on the embedded tiny model: set up, build, write the tiny checkpoint, and generate from it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build/moeserve make-tiny --out build/tiny-model
build/moeserve generate --model build/tiny-model --tokens 200006,17360,200008,3575,553 --max-tokens 32 --temperature 0
