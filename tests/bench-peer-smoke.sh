#!/bin/sh
# Meson test bench-peer-smoke: tools/bench/peer.sh end to end on the tiny preset
# (gen, export-gguf q4_1/q4_0, minicpmd-bench, llama.cpp through node-llama-cpp,
# the report). Checks the report's shape only, never a speed. Skips (77) when
# node-llama-cpp is not installed in tools/bench/peer (it needs npm's network).
#   bench-peer-smoke.sh SRC_ROOT BUILD_ROOT WORKDIR
set -eu
src=$1 build=$2 work=$3
[ -d "$src/tools/bench/peer/node_modules/node-llama-cpp" ] || {
    echo "SKIP: node-llama-cpp not installed (cd tools/bench/peer && npm ci --omit=optional --ignore-scripts)"
    exit 77
}
command -v node >/dev/null || { echo "SKIP: no node"; exit 77; }
rm -rf "$work"
report=$("$src/tools/bench/peer.sh" --build "$build" --work "$work" --preset tiny \
         --prompt 16 --gen 4 --reps 2)
echo "$report"
fail=0
for want in '^host .* (cpuid family [0-9]* model [0-9]*); ' \
            '^minicpmd decode kernel [a-z0-9-]* ([a-z ]*' '^roofs     read [0-9.]* GB/s' '^minicpmd (Q4NX) *[0-9.]* *[0-9.]*$' \
            '^llama.cpp Q4_1 (same) *[0-9.]* *[0-9.]*$' '^llama.cpp Q4_0 (best) *[0-9.]* *[0-9.]*$' \
            '^minicpmd decode [0-9.]* of the read roof ([0-9.]* of the roof measured around its reps), prefill [0-9.]* of the int8 roof$' \
            '^ratio minicpmd / llama.cpp (same weights, Q4_1): prefill [0-9.]*x, decode [0-9.]*x$' \
            "^ratio minicpmd / llama.cpp (llama.cpp's best, Q4_0): prefill [0-9.]*x, decode [0-9.]*x$"; do
    echo "$report" | grep -q "$want" || { echo "FAIL: no line matching /$want/"; fail=1; }
done
# Two rounds of three engines, each with its prefill and decode rates and the
# llama.cpp rounds with all the tokens decoded.
/usr/bin/python3 - "$work"/peer-*.jsonl <<'PY' || fail=1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
kinds = [r['format'] if r['engine'] == 'llama.cpp' else r['engine'] for r in rows]
assert kinds == ['minicpmd', 'q4_1', 'q4_0'] * 2, kinds
for r in rows:
    assert r['prefill_tok_s'] > 0 and r['decode_tok_s'] > 0, r
    assert r['prompt_tokens'] == 16 and r['gen_tokens'] == 4 and r['threads'] == 2, r
    assert r['cpu_family'] > 0 and isinstance(r['cpu_model'], int) and r['cpu_name'], r
    if r['engine'] == 'minicpmd':
        assert r['decode_bw_ratio_paired'] > 0 and r['roof_read_paired_gb_s'] > 0, r
        assert r['decode_kernel'] and r['decode_choice'], r
        assert all(v > 0 for v in r['decode_kernel_gb_s'].values()), r
    if r['engine'] == 'llama.cpp':
        assert all(x['decoded'] == 4 for x in r['runs']), r
print('jsonl: 6 rounds, fields ok')
PY
exit $fail
