#!/bin/sh
# The demo model, from nothing: tools/train/train.sh [OUT] (default models/minicpm5-demo).
# Two runs of tools/train/train.py, seed 1, one torch thread (53 min in all on this
# 2-core machine, beside another training run): 4,000 steps from a fresh model with
# the induction circuit wired in; then 1,200 steps on fresh conversations at a lower
# learning rate, half the batches from the copying skills (echo, the call, JSON),
# all through the Q4_1 fake quantization. Debian's /usr/bin/python3 with python3-torch,
# python3-numpy and python3-jinja2 (and libopenblas0-pthread). See tools/train/README.md.
set -eu
cd "$(dirname "$0")/../.."
out=${1:-models/minicpm5-demo}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 tools/train/train.py --out "$tmp/stage1" --lr 1e-3 --induction-init \
    --space-merges 700 --space-init --steps 4000 --batch-tokens 3072 --examples 80000 \
    --eval-every 500 --eval-n 8 --qat-frac 0.2
/usr/bin/python3 tools/train/train.py --out "$out" --init "$tmp/stage1" --stage 1 --lr 3e-4 \
    --steps 1200 --batch-tokens 3072 --examples 50000 --copy-warmup 1 --copy-mix 0.5 \
    --eval-every 600 --eval-n 8 --qat-frac 1.0
