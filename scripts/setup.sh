#!/usr/bin/env bash
# Installs the Debian packages accord builds and tests with (chromium,
# chromium-driver and python3-selenium for the chat page's browser test,
# tests/web/). Does nothing when they are all present; otherwise runs
# `apt-get update` once and installs the rest.
# Then pip-installs numpy and gguf==0.19.0 unless python3 has them: the
# ZooF32 tests write the model zoo's F32 files with them
# (tests/zoo/make_zoo_f32.sh, which falls back to a virtual environment).
set -euo pipefail

python_packages() {
  python3 -c "import numpy, gguf" 2>/dev/null && return 0
  echo "accord setup: pip-installing numpy gguf==0.19.0"
  python3 -m pip install --quiet --user numpy gguf==0.19.0 ||
    python3 -m pip install --quiet --user --break-system-packages numpy gguf==0.19.0 ||
    echo "accord setup: pip failed; tests/zoo/make_zoo_f32.sh will use a virtual environment"
}

packages=(
  build-essential cmake clang libclang-rt-14-dev
  libcaf-dev libspdlog-dev libboost-dev nlohmann-json3-dev libcli11-dev
  libxxhash-dev libicu-dev libgtest-dev libgmock-dev libbenchmark-dev libssl-dev
  curl python3-venv python3-pip
  chromium chromium-driver python3-selenium
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
    missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  python_packages
  exit 0
fi

sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
echo "accord setup: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
python_packages
