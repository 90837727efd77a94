#!/usr/bin/env bash
# The ctest fixture of the ZooF32 tests: writes the model zoo's F32
# originals into OUT with the zoo's own make_zoo.py (SHARED/models/zoo),
# unless they are there already, and checks them against the sha256 list of
# the zoo's README. Then one more, not in the zoo: a qwen3moe of four
# blocks of eight experts (four-blocks/qwen3moe-f32.gguf), so that experts
# spread over four ranks (tests/expert_parallel_test.cpp). make_zoo.py needs numpy and gguf==0.19.0: those of
# python3 (scripts/setup.sh installs them), else a virtual environment
# beside OUT.
#   make_zoo_f32.sh SHARED OUT
set -euo pipefail
shared=${ACCORD_SHARED:-$1} out=$2
zoo="$shared/models/zoo"
python=python3
if ! "$python" -c "import numpy, gguf" 2>/dev/null; then
  venv="$out-venv"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -c "import numpy, gguf" 2>/dev/null ||
    "$venv/bin/pip" install --quiet --disable-pip-version-check numpy gguf==0.19.0
  python="$venv/bin/python"
fi
# "<sha256>  <name>-f32.gguf" lines of the README.
expected=$(grep -E '^ *[0-9a-f]{64} +[a-z0-9]+-f32\.gguf$' "$zoo/README.md" | sed 's/^ *//')
[ -n "$expected" ] || { echo "make_zoo_f32.sh: no sha256 list in $zoo/README.md" >&2; exit 1; }
mkdir -p "$out"
if ! (cd "$out" && sha256sum --quiet -c <<<"$expected" >/dev/null 2>&1); then
  "$python" "$zoo/make_zoo.py" "$out" 100 >/dev/null
fi
if ! (cd "$out" && sha256sum --quiet -c <<<"$expected"); then
  echo "make_zoo_f32.sh: the models in $out differ from the sha256 in $zoo/README.md" >&2
  exit 1
fi
echo "make_zoo_f32.sh: $(wc -l <<<"$expected") F32 models in $out match the zoo's sha256"
if [ ! -f "$out/four-blocks/qwen3moe-f32.gguf" ]; then
  mkdir -p "$out/four-blocks"
  "$python" "$zoo/make_zoo.py" "$out/four-blocks" 107 --one qwen3moe --layers 4 --experts 8 --used 2 --hidden 256 >/dev/null
fi
