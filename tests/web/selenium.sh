#!/usr/bin/env bash
# Runs a browser test of tests/web/ with a python3 that has Debian's
# python3-selenium (scripts/setup.sh installs it with chromium and
# chromium-driver): the first of `python3` and /usr/bin/python3 that does.
#   selenium.sh TEST.py ACCORD_BINARY SHARED_DIR OUT_DIR
set -euo pipefail
script="$(dirname "${BASH_SOURCE[0]}")/$1"
shift
for python in python3 /usr/bin/python3; do
  if "$python" -c "import selenium" 2>/dev/null; then
    exec "$python" "$script" "$@"
  fi
done
echo "selenium.sh: no python3 imports selenium; scripts/setup.sh installs python3-selenium" >&2
exit 1
