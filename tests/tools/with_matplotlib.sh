#!/usr/bin/env bash
# Runs a python script with the first python3 that has matplotlib (the one
# on PATH, else Debian's, where tools/setup.sh installs python3-matplotlib);
# exits 77 (CTest: skipped) saying why when there is none.
for py in python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null && "$py" -c "import matplotlib" 2>/dev/null; then
    exec "$py" "$@"
  fi
done
echo "skipped: no python3 with matplotlib here (tools/setup.sh installs python3-matplotlib)"
exit 77
