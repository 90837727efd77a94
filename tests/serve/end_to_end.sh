#!/usr/bin/env bash
# Runs tests/serve/end_to_end.py in a virtual environment with the openai
# package from PyPI, made once in VENV_DIR and reused.
#   end_to_end.sh ACCORD_BINARY SHARED_DIR VENV_DIR
# ACCORD_SHARED, where set, overrides SHARED_DIR as it does for every test.
set -euo pipefail
accord=$1 shared=${ACCORD_SHARED:-$2} venv=$3
if ! "$venv/bin/python" -c "import openai" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check openai
fi
exec "$venv/bin/python" "$(dirname "${BASH_SOURCE[0]}")/end_to_end.py" "$accord" "$shared"
