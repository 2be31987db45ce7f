#!/usr/bin/env bash
# Runs a python script with the first python that has torch, transformers and
# tokenizers: $FSDPGEN_HF_PYTHON, the python3 on PATH, or the venv
# /tmp/hf the reference scripts' docs make (tools/gpt2_reference.py); exits
# 77 (CTest: skipped) saying why when there is none (CI has no torch).
for py in "${FSDPGEN_HF_PYTHON:-}" python3 /tmp/hf/bin/python; do
  if [ -n "$py" ] && command -v "$py" >/dev/null &&
    "$py" -c "import torch, transformers, tokenizers" 2>/dev/null; then
    exec "$py" "$@"
  fi
done
echo "skipped: no python with torch, transformers and tokenizers here (\$FSDPGEN_HF_PYTHON," \
  "python3, /tmp/hf/bin/python); python3 -m venv /tmp/hf && /tmp/hf/bin/pip install torch" \
  "transformers tokenizers makes one"
exit 77
