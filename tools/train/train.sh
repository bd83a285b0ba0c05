#!/bin/sh
# The demo model, from nothing: tools/train/train.sh [OUT] (default models/minicpm5-demo).
# Eleven runs of tools/train/train.py, seed 1 (~166 min in all on this 2-core machine
# with two torch threads, the first two slowed by benchmarks and tests beside them):
#   1. 4,000 steps from a fresh model with the induction circuit wired in, its
#      one-token and two-token matches (wiring.py);
#   2. 1,200 steps on fresh conversations at a lower learning rate, half the batches
#      from the copying skills (echo, the call, JSON);
#   3. 1,200 steps with 60 % of the copied words, cities and names from a wide
#      vocabulary (accents, other scripts, emoji, common words inside longer ones)
#      and 20 % of the conversations off-skill (answered with the capability line,
#      or Open WebUI's tasks with JSON);
#   4. 400 steps with those shares and 30 % of the batches copying, at a lower rate;
#   5. and 6. 300 steps each with a quarter, then half, more arithmetic;
#   7. 400 steps with 30 % of the turns in Open WebUI's task chats a weather answer
#      (with none, a chat about the weather made the model start a tool call);
#   8. to 11. 600, 800, 600 and 600 steps for words it never saw and thinking (below).
# Stages 2-11 run all through the Q4_1 fake quantization. Debian's /usr/bin/python3 with
# python3-torch, python3-numpy and python3-jinja2 (and libopenblas0-pthread: without
# it torch's reference BLAS makes every step ~10x slower). See tools/train/README.md.
set -eu
cd "$(dirname "$0")/../.."
out=${1:-models/minicpm5-demo}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
t=tools/train/train.py
/usr/bin/python3 $t --out "$tmp/stage1" --lr 1e-3 --induction-init --two-back \
    --space-merges 700 --space-init --steps 4000 --batch-tokens 3072 --examples 80000 \
    --eval-every 500 --eval-n 8 --qat-frac 0.2 --threads 2
/usr/bin/python3 $t --out "$tmp/stage2" --init "$tmp/stage1" --stage 1 --lr 3e-4 \
    --steps 1200 --batch-tokens 3072 --examples 50000 --copy-warmup 1 --copy-mix 0.5 \
    --eval-every 600 --eval-n 8 --qat-frac 1.0 --threads 2
/usr/bin/python3 $t --out "$tmp/stage3" --init "$tmp/stage2" --stage 2 --lr 5e-4 \
    --steps 1200 --batch-tokens 3072 --examples 20000 --copy-warmup 1 --copy-mix 0.5 \
    --wide 0.6 --offskill 0.2 --eval-every 200 --eval-n 4 --qat-frac 1.0 --threads 2
/usr/bin/python3 $t --out "$tmp/stage4" --init "$tmp/stage3" --stage 3 --lr 2e-4 \
    --steps 400 --batch-tokens 3072 --examples 20000 --copy-mix 0.3 --wide 0.6 --offskill 0.15 \
    --eval-every 200 --eval-n 4 --qat-frac 1.0 --threads 2
/usr/bin/python3 $t --out "$tmp/stage5" --init "$tmp/stage4" --stage 4 --lr 1e-4 \
    --steps 300 --batch-tokens 3072 --examples 20000 --wide 0.6 --offskill 0.15 \
    --arith-extra 0.25 --eval-every 300 --eval-n 4 --qat-frac 1.0 --threads 2
/usr/bin/python3 $t --out "$tmp/stage6" --init "$tmp/stage5" --stage 5 --lr 1e-4 \
    --steps 300 --batch-tokens 3072 --examples 20000 --wide 0.6 --offskill 0.15 \
    --arith-extra 0.5 --eval-every 300 --eval-n 4 --qat-frac 1.0 --threads 2
/usr/bin/python3 $t --out "$tmp/stage7" --init "$tmp/stage6" --stage 6 --lr 1e-4 \
    --steps 400 --batch-tokens 3072 --examples 20000 --wide 0.6 --offskill 0.2 \
    --task-weather 0.3 --arith-extra 0.5 --eval-every 400 --eval-n 4 --qat-frac 1.0 --threads 2
# Stages 8-11: the same mix with 30 % of the batches copying, the wide words partly
# from random pieces of the tokenizer's vocabulary (--hard), the extra arithmetic
# half with thinking on and the operands a model misplaces, no weight decay on the
# embedding and the head; stage 11 first lifts the head rows training had shrunk.
late() {
    /usr/bin/python3 $t --batch-tokens 3072 --examples 20000 --copy-warmup 1 --copy-mix 0.3 \
        --wide 0.6 --offskill 0.2 --task-weather 0.3 --arith-extra 0.5 --think-arith 0.5 \
        --embed-decay 0 --eval-every 300 --eval-n 4 --qat-frac 1.0 --threads 2 "$@"
}
late --out "$tmp/stage8" --init "$tmp/stage7" --stage 7 --lr 2e-4 --steps 600 --hard 0.4 \
    --small-operands 0.3
late --out "$tmp/stage9" --init "$tmp/stage8" --stage 8 --lr 2e-4 --steps 800 --hard 0.6 \
    --small-operands 0.4
late --out "$tmp/stage10" --init "$tmp/stage9" --stage 9 --lr 2e-4 --steps 600 --hard 0.6 \
    --small-operands 0.4
late --out "$out" --init "$tmp/stage10" --stage 10 --lr 2e-4 --steps 600 --hard 0.6 \
    --small-operands 0.4 --head-renorm
