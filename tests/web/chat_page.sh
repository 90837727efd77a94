#!/usr/bin/env bash
# Runs tests/web/chat_page_test.py with a python3 that has Debian's
# python3-selenium (scripts/setup.sh installs it with chromium and
# chromium-driver): the first of `python3` and /usr/bin/python3 that does.
#   chat_page.sh ACCORD_BINARY SHARED_DIR OUT_DIR
set -euo pipefail
for python in python3 /usr/bin/python3; do
  if "$python" -c "import selenium" 2>/dev/null; then
    exec "$python" "$(dirname "${BASH_SOURCE[0]}")/chat_page_test.py" "$@"
  fi
done
echo "chat_page.sh: no python3 imports selenium; scripts/setup.sh installs python3-selenium" >&2
exit 1
