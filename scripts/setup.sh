#!/usr/bin/env bash
# Installs the Debian packages accord builds with. Does nothing when they are
# all present; otherwise runs `apt-get update` once and installs the rest.
set -euo pipefail

packages=(
  build-essential cmake clang libclang-rt-14-dev
  libcaf-dev libspdlog-dev libboost-dev nlohmann-json3-dev libcli11-dev
  libxxhash-dev libicu-dev libgtest-dev libgmock-dev libbenchmark-dev libssl-dev
  curl python3-venv
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
    missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
echo "accord setup: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
