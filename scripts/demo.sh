#!/usr/bin/env bash
# Installs what accord needs, builds it and generates a story.
# Uses stories260K from ../shared/models (or beside the repository this one
# was cloned from; ACCORD_SHARED=DIR overrides both) when it is there;
# otherwise writes a synthetic model and says so.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh" --target accord "$root/build"
accord=$root/build/apps/accord
source "$root/scripts/shared_dir.sh"
shared=$(shared_dir "$root")

if [ -f "$shared/models/stories260K.bin" ] && [ -f "$shared/models/tok512.bin" ]; then
  echo "== accord demo: stories260K (a real 260K-parameter TinyStories model) from $shared/models"
  model=$shared/models/stories260K.bin
  tokenizer=$shared/models/tok512.bin
else
  echo "== accord demo: no shared model found under $shared/models."
  echo "== Using a synthetic model with deterministic random weights: the machinery is real, the text is noise."
  mkdir -p "$root/build/demo"
  model=$root/build/demo/synthetic.bin
  tokenizer=$root/build/demo/synthetic.tokenizer.bin
  [ -f "$model" ] || "$accord" synth --dim 256 --hidden 768 --layers 4 --heads 8 --kv-heads 4 \
    --vocab 1024 --seq 512 --seed 1 --out "$model"
fi

echo "== Sampling at temperature 0.8, seed 7, streamed as it is produced:"
"$accord" generate --model "$model" --tokenizer "$tokenizer" --prompt "Once upon a time" \
  --max-tokens 200 --temperature 0.8 --seed 7
echo "== Greedy, as one JSON report:"
"$accord" generate --model "$model" --tokenizer "$tokenizer" --prompt "The cat sat" \
  --max-tokens 40 --temperature 0 --json
