#!/usr/bin/env bash
# The layering read from the sources: every #include "FOLDER/..." in src/ names a folder its own layer may see,
# and the model families do not include one another. The build enforces the same (src/CMakeLists.txt,
# moeserve_layer); this also covers headers that nothing compiles yet. Prints each violation; exits 1 on any.
set -euo pipefail
cd "$(dirname "$0")/.."

# What each folder of src/ may include: itself and the layers below it (docs/ARCHITECTURE.md).
declare -A allowed=(
  [util]="util"
  [model]="util model"
  [tokenizer]="util tokenizer"
  [harmony]="util tokenizer harmony"
  [chat]="util tokenizer chat"
  [structured]="util structured"
  [sampling]="util structured sampling"
  [runner]="util model structured sampling runner"
  [engine]="util model structured sampling runner engine"
  [server]="util model tokenizer harmony chat structured sampling runner engine server"
  [bench]="util model tokenizer harmony chat structured sampling runner engine bench eval"
  [eval]="util model tokenizer harmony chat structured sampling runner engine bench eval"
  [cli]="util model tokenizer harmony chat structured sampling runner engine server bench eval cli"
)
families=(gpt_oss deepseek_v3 eagle3)

violations=0
report() {
  echo "$1"
  violations=$((violations + 1))
}

while IFS= read -r file; do
  folder=${file#src/}
  folder=${folder%%/*}
  [ -n "${allowed[$folder]+set}" ] || { report "$file: src/$folder is not a known layer (add it to $0)"; continue; }
  # The model family the file belongs to, if any (src/model/FAMILY/...).
  family=""
  for f in "${families[@]}"; do [[ $file == src/model/$f/* ]] && family=$f; done
  while IFS= read -r line; do
    [[ $line =~ ^([0-9]+):#include\ \"([^\"]*)\" ]] || continue
    number=${BASH_REMATCH[1]}
    target=${BASH_REMATCH[2]}
    [[ $target == */* ]] || continue
    used=${target%%/*}
    [[ " ${allowed[$folder]} " == *" $used "* ]] ||
      report "$file:$number: includes $target (src/$folder may include: ${allowed[$folder]})"
    if [[ $folder == model ]]; then
      for f in "${families[@]}"; do
        [[ $target == model/$f/* && $f != "$family" ]] &&
          report "$file:$number: includes $target (families include only model/'s shared pieces and their own)"
      done
    fi
  done < <(grep -n '^#include "' "$file" || true)
done < <(git ls-files --cached --others --exclude-standard 'src/*.h' 'src/*.cc' 'src/*.cu' 'src/*.cuh')

if [ "$violations" -gt 0 ]; then
  echo "check_layers: $violations include(s) run back up the layers"
  exit 1
fi
echo "check_layers: every include in src/ stays within its layer"
