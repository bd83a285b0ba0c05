#!/usr/bin/env python3
"""minicpmd-bench --hybrid on a generated tiny pack: the report's fields and how
they relate (the sizes exact, the times consistent); no speed is judged.

    bench-hybrid.py MINICPMD_PACK MINICPMD_BENCH WORKDIR
"""
import json
import math
import os
import shutil
import subprocess
import sys


def main(argv):
    packgen, bench, work = argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    pack = os.path.join(work, "tiny")
    subprocess.run([packgen, "gen", "--preset", "tiny", "--seed", "5", "--out", pack],
                   check=True, stdout=subprocess.DEVNULL)
    cfg = json.load(open(os.path.join(pack, "config.json")))
    failures = []

    def check(title, ok, detail):
        print(("ok     " if ok else "FAILED ") + title)
        print("       " + detail)
        if not ok:
            failures.append(title)

    p = subprocess.run([bench, pack, "--hybrid", "100", "--prompt", "32", "--npu-tps", "20",
                        "--npu-kv-heads", "4", "--reps", "1", "--threads", "1", "--json"],
                       capture_output=True, text=True, timeout=300)
    j = json.loads(p.stdout) if p.returncode == 0 else {}
    row = 4 * cfg["head_dim"] * 4
    want_mb = cfg["num_hidden_layers"] * 100 * row / 1e6
    check("--hybrid: the hand-off's size and the batches",
          j.get("hybrid_tokens") == 100 and j.get("chunk") == 32 and j.get("npu_kv_heads") == 4
          and math.isclose(j.get("handoff_mb", 0), want_mb),
          "exit %d, %s (want %.3f MB)" % (p.returncode, p.stdout.strip() or p.stderr.strip(),
                                          want_mb))
    check("--hybrid: the times add up",
          j and math.isclose(j["ttft_npu_s"], 100 / 20) and
          math.isclose(j["ttft_hybrid_s"], j["cpu_prefill_s"] + j["handoff_s"] + 1 / 20,
                       rel_tol=1e-4) and
          math.isclose(j["cpu_prefill_tok_s"], 100 / j["cpu_prefill_s"], rel_tol=1e-4) and
          math.isclose(j["speedup"], j["ttft_npu_s"] / j["ttft_hybrid_s"], rel_tol=1e-4),
          "first token %s s hybrid, %s s on the NPU" % (j.get("ttft_hybrid_s"),
                                                      j.get("ttft_npu_s")))
    p = subprocess.run([bench, pack, "--hybrid", "10", "--npu-kv-heads", "3"],
                       capture_output=True, text=True, timeout=300)
    check("--hybrid: KV heads that do not repeat the pack's are refused",
          p.returncode == 1 and "not a multiple" in p.stderr, p.stderr.strip())
    p = subprocess.run([bench, pack, "--hybrid", "10", "--npu-tps", "0"],
                       capture_output=True, text=True, timeout=300)
    check("--hybrid: a rate of 0 is refused", p.returncode == 1 and "--npu-tps" in p.stderr,
          p.stderr.strip())
    print("%d passed, %d failed" % (4 - len(failures), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
