#!/bin/sh
# tools/bench/peer.sh: minicpmd and llama.cpp side by side, in one run, on the same
# shapes.
#
#   tools/bench/peer.sh [--build DIR] [--work DIR] [--preset 2b] [--threads 2]
#                       [--prompt 512] [--gen 128] [--reps 3]
#
# Engines, all on the pack of `minicpmd-pack gen --preset P --seed 1` (2b: MiniCPM5-2B's
# shapes, random weights, 1.9 GB; generated under --work on first use):
#   minicpmd    build/minicpmd-bench --json on the pack (Q4NX, its best kernels); each
#               run also measures the host's read and int8 roofs (tools/bench/roof.c)
#   llama Q4_1  llama.cpp on `minicpmd-pack export-gguf --type q4_1`: the same weights,
#               exactly
#   llama Q4_0  llama.cpp on `export-gguf --type q4_0`: its fastest CPU format (repacked
#               at load), same shapes
# llama.cpp is node-llama-cpp's prebuilt CPU binary, the version pinned in
# tools/bench/peer/package.json (installed there with `npm ci` on first use; nothing
# is compiled: build "never"), timed by tools/bench/peer/llama-bench.mjs the way
# minicpmd-bench times minicpmd. Rounds are interleaved (minicpmd, Q4_1, Q4_0, then
# again) so that a change in the machine's load hits all three; each round is one
# prefill of --prompt random tokens and --gen greedy decode steps. The report: every
# round, the medians, the ratios (minicpmd / llama.cpp) and the roofs, with the CPU
# model and the load average before and after (a shared machine shows there).
# Every round's JSON goes to WORK/peer-<UTC time>.jsonl.
#
# Not part of the test suite's timing: test bench-peer-smoke runs it on the tiny
# preset and checks the report's shape only.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
build=$here/../../build
work=
preset=2b
threads=2
prompt=512
gen=128
reps=3
while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --preset) preset=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --prompt) prompt=$2; shift 2 ;;
    --gen) gen=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "peer.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
build=$(cd "$build" && pwd)
work=${work:-$build/peer}
pack_bin=$build/minicpmd-pack
bench_bin=$build/minicpmd-bench
for b in "$pack_bin" "$bench_bin"; do
    [ -x "$b" ] || { echo "peer.sh: $b not built (ninja -C $build)" >&2; exit 1; }
done
command -v node >/dev/null || { echo "peer.sh: node is needed for llama.cpp (node-llama-cpp)" >&2; exit 1; }
if [ ! -d "$here/peer/node_modules/node-llama-cpp" ]; then
    echo "peer.sh: installing node-llama-cpp (tools/bench/peer/package-lock.json)" >&2
    (cd "$here/peer" && npm ci --omit=optional --ignore-scripts --no-audit --no-fund >&2)
fi

mkdir -p "$work"
pack=$work/$preset
if [ ! -f "$pack/model.q4nx" ]; then
    echo "peer.sh: generating the $preset pack in $pack" >&2
    "$pack_bin" gen --preset "$preset" --seed 1 --out "$pack" >&2
fi
for t in q4_1 q4_0; do
    g=$work/$preset-$t.gguf
    if [ ! -f "$g" ] || [ "$pack/model.q4nx" -nt "$g" ]; then
        "$pack_bin" export-gguf "$pack" "$g" --type "$t" >&2
    fi
done

out=$work/peer-$(date -u +%Y%m%dT%H%M%SZ).jsonl
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
# cpuid family and model (decimal, as /proc/cpuinfo gives them): the host class
# every figure belongs to; each row of the jsonl carries them (minicpmd-bench
# --json reports its own from cpuid).
cpu_family=$(sed -n 's/^cpu family[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
cpu_model=$(sed -n 's/^model[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
cpu_json=$(printf '"cpu_family":%d,"cpu_model":%d,"cpu_name":"%s",' "${cpu_family:-0}" \
    "${cpu_model:-0}" "$(printf '%s' "$cpu" | sed 's/[\\"]/\\&/g')")
load0=$(cut -d' ' -f1-3 /proc/loadavg)
echo "peer.sh: $preset pack, $threads threads, prompt $prompt, gen $gen, $reps interleaved rounds" >&2
i=1
while [ "$i" -le "$reps" ]; do
    echo "peer.sh: round $i of $reps" >&2
    "$bench_bin" "$pack" --threads "$threads" --prompt "$prompt" --gen "$gen" --reps 1 --json |
        sed 's/^{/{"engine":"minicpmd",/' >> "$out"
    for t in q4_1 q4_0; do
        node "$here/peer/llama-bench.mjs" "$work/$preset-$t.gguf" --threads "$threads" \
            --prompt "$prompt" --gen "$gen" --reps 1 |
            sed "s/^{/{\"format\":\"$t\",$(printf '%s' "$cpu_json" | sed 's/[&/\\]/\\&/g')/" >> "$out"
    done
    i=$((i + 1))
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)

/usr/bin/python3 - "$out" "$cpu" "$load0" "$load1" "$preset" "$cpu_family" "$cpu_model" <<'EOF'
import json, statistics, sys
path, cpu, load0, load1, preset, family, model = sys.argv[1:]
rows = [json.loads(l) for l in open(path)]
mc = [r for r in rows if r['engine'] == 'minicpmd']
ll = {t: [r for r in rows if r.get('format') == t] for t in ('q4_1', 'q4_0')}
med = lambda rs, k: statistics.median(r[k] for r in rs)
print(f'host      {cpu} (cpuid family {family} model {model}); load average {load0} before, '
      f'{load1} after (shared machine)')
print(f'shapes    {preset} pack, {mc[0]["threads"]} threads, prompt {mc[0]["prompt_tokens"]}, '
      f'{mc[0]["gen_tokens"]} decoded, {len(mc)} interleaved rounds; llama.cpp = '
      f'node-llama-cpp {ll["q4_1"][0]["node-llama-cpp"]} (prebuilt CPU)')
print('rounds    ' + '; '.join(
    f'minicpmd {a["prefill_tok_s"]:.1f}/{a["decode_tok_s"]:.2f}, Q4_1 {b["prefill_tok_s"]:.1f}/'
    f'{b["decode_tok_s"]:.2f}, Q4_0 {c["prefill_tok_s"]:.1f}/{c["decode_tok_s"]:.2f}'
    for a, b, c in zip(mc, ll['q4_1'], ll['q4_0'])) + '  (prefill/decode tok/s)')
roof = med(mc, 'roof_read_gb_s')
int8 = med(mc, 'roof_int8_gmac_s')
print(f'roofs     read {roof:.2f} GB/s, int8 {int8:.1f} GMAC/s (medians of the rounds)')
print(f'{"":22}{"prefill tok/s":>14}{"decode tok/s":>14}')
for name, rs in (('minicpmd (Q4NX)', mc), ('llama.cpp Q4_1 (same)', ll['q4_1']),
                 ('llama.cpp Q4_0 (best)', ll['q4_0'])):
    print(f'{name:22}{med(rs, "prefill_tok_s"):14.2f}{med(rs, "decode_tok_s"):14.2f}')
print(f'minicpmd decode {med(mc, "decode_bw_ratio"):.2f} of the read roof '
      f'({med(mc, "decode_bw_ratio_paired"):.2f} of the roof measured around its reps), prefill '
      f'{med(mc, "prefill_compute_ratio"):.2f} of the int8 roof')
for t, label in (('q4_1', 'same weights, Q4_1'), ('q4_0', "llama.cpp's best, Q4_0")):
    print(f'ratio minicpmd / llama.cpp ({label}): prefill '
          f'{med(mc, "prefill_tok_s") / med(ll[t], "prefill_tok_s"):.2f}x, decode '
          f'{med(mc, "decode_tok_s") / med(ll[t], "decode_tok_s"):.2f}x')
for r in mc:
    rates = ', '.join(f'{k} {v:.1f}' for k, v in r.get('decode_kernel_gb_s', {}).items())
    print(f'minicpmd decode kernel {r.get("decode_kernel")} ({r.get("decode_choice")}'
          + (f': {rates} GB/s at load' if rates else '') + ')')
print(f'(every round: {path})')
EOF
