#!/bin/sh
# The demo model, from nothing: tools/train/train.sh [OUT] (default models/minicpm5-demo).
# Two stages of tools/train/train.py (the second continues the first on fresh
# conversations with a new learning-rate schedule). Debian's /usr/bin/python3 with
# python3-torch, python3-numpy and python3-jinja2.
set -eu
cd "$(dirname "$0")/../.."
out=${1:-models/minicpm5-demo}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 tools/train/train.py --out "$tmp/stage1" --steps 2000 --batch-tokens 1536 \
    --stop-after 1500 --lr 3e-3 --examples 60000 --eval-every 500 --eval-n 6 --qat-frac 0.2
/usr/bin/python3 tools/train/train.py --out "$out" --init "$tmp/stage1" --stage 1 \
    --steps 1500 --stop-after 500 --batch-tokens 1536 --lr 2e-3 --examples 35000 --eval-every 500 \
    --eval-n 6 --qat-frac 0.3
