#!/usr/bin/env python3
"""Write a stand-in open NPU kernel set for a minicpmd pack, for tests.

    mkkset.py PACK_DIR OUT_DIR [--set KEY=VALUE]... [--drop RELPATH]... [--max-ctx N]
              [--designs]

The manifest has the shape OpenFlowLM-Next's export writes for the dense recipe
(recipes/manifest.py + recipes/dense.py; docs/npu-kernels.md §1.3, §2): spec,
hf_config_check, layout, layers, contexts dx / ln / lm, kernels dx (attnpos) / ln /
lm, layer_types.dense with its buffers, one `run dx` per layer and the packing plan
(std_perm of the seven projections, put of the two norms), the ln + lm tail,
globals, pack.lm_head / embed / norm. Sizes follow dense.py's rules where the
driver depends on them (pool offsets, KV row = 2 * kv_heads * head_dim * 2,
position record = max(1024, kv_heads * head_dim * 2)).

The xclbins are placeholders and the instruction streams are synthetic: dx's
holds exactly the four attnpos sites (a BD write, then DDR patches on arg 3 at
offset 0 and at one KV row, and on arg 5 at one record with bit 31 set) as a
stream compiled for position 1 would, between filler ops. Nothing here runs on an
NPU; the conformance double never reads the files.

--set spec.num_layers=42 or --set hf_config_check.vocab_size=7 breaks the set on
purpose; --drop dx/insts.bin leaves a named file out.

--designs refuses (exit 2) a model the dense designs cannot be specialised for,
as the functional model of the kernels (tests/xrt/double/model.h) needs: hidden
and FFN multiples of 256, KV heads even, head_dim 64 or 128, a position record
of at most two attention elements. Without it any pack gets a set (the call-
sequence tests use narrow packs the designs would refuse).
"""
import json
import math
import os
import struct
import sys

MB = 1 << 20
CHUNK = 5120


def roundup(v, m):
    return (v + m - 1) // m * m


def q4_chunks(rows, cols):
    return (rows // 32) * (roundup(cols, 256) // 256)


def attn_stream(kv_row, ptab_row):
    w = [0x06030100, 0, 0, 0]                      # header (skipped by the scan)
    w += [0, 1, 2, 3, 4, 5]                        # op 0, 6 words
    reg = 0x1D004
    w += [1, 0, reg, 0, 7 * kv_row // 4, 0, 0, 0, 0, 0, 0, 0]      # op 1: BD write, length @+4
    w += [0x81, 0, 0, 0, 0, 0, reg + 4, 0, 3, 0, 0, 0]             # KV window fill: arg 3 @0
    w += [0x80, 0, 0, 0]                           # op 0x80, 4 words
    w += [0x81, 0, 0, 0, 0, 0, 0x1D024, 0, 3, 0, kv_row, 0]        # new row drain: arg 3 @1 row
    w += [0x81, 0, 0, 0, 0, 0, 0x1D044, 0, 5, 0, ptab_row | 0x80000000, 0]   # record: arg 5
    w += [0x81, 0, 0, 0, 0, 0, 0x1D064, 0, 0, 0, 4096, 0]          # a weight fill: arg 0
    w += [3, 0, 0, 0, 0, 0, 0]                     # op 3, 7 words
    return struct.pack("<%dI" % len(w), *w)


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    pack, out = argv[1], argv[2]
    sets, drops, max_ctx, designs = [], [], 4096, False
    i = 3
    while i < len(argv):
        if argv[i] == "--designs":
            designs = True
            i += 1
            continue
        if argv[i] == "--set":
            sets.append(argv[i + 1])
        elif argv[i] == "--drop":
            drops.append(argv[i + 1])
        elif argv[i] == "--max-ctx":
            max_ctx = int(argv[i + 1])
        else:
            raise SystemExit("unknown option " + argv[i])
        i += 2
    cfg = json.load(open(os.path.join(pack, "config.json")))
    H, F = cfg["hidden_size"], cfg["intermediate_size"]
    L, NH, KVH = cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    HD = cfg.get("head_dim", H // NH)
    V = cfg["vocab_size"]
    theta = cfg.get("rope_theta", 10000.0)
    QW, KVW = NH * HD, KVH * HD
    ELN, E_A = H * 2, KVW * 2
    kv_row, ptab_row = 2 * E_A, max(1024, E_A)
    half = HD // 2
    inv_freq = [theta ** (-i / half) for i in range(half)]

    if designs:
        why = [w for bad, w in (
            (H % 256, "hidden %d is not a multiple of 256" % H),
            (F % 256, "FFN %d is not a multiple of 256" % F),
            (KVH % 2, "%d KV heads is odd" % KVH),
            (HD not in (64, 128), "head_dim %d is not 64 or 128" % HD),
            (ptab_row > 2 * E_A and ptab_row > 1024,
             "the position record is more than two attention elements")) if bad]
        if why:
            print("mkkset.py: the dense designs do not fit %s: %s" % (pack, "; ".join(why)),
                  file=sys.stderr)
            return 2
    pre = "model.layers.{l}."
    pool, off = [], 0
    for name, rows, cols in (("self_attn.q_proj", QW, H), ("self_attn.k_proj", KVW, H),
                             ("self_attn.v_proj", KVW, H), ("self_attn.o_proj", H, QW),
                             ("mlp.up_proj", F, H), ("mlp.gate_proj", F, H),
                             ("mlp.down_proj", H, F)):
        n = q4_chunks(rows, cols)
        pool.append({"op": "std_perm", "tensor": pre + name + ".weight", "dst": off, "nch": n,
                     "in_dim": roundup(cols, 256)})
        off += n * CHUNK
    pool_bytes = roundup(off, MB)
    consts = [{"op": "put", "tensor": pre + "input_layernorm.weight", "dst": 0, "cap": ELN},
              {"op": "put", "tensor": pre + "post_attention_layernorm.weight", "dst": ELN,
               "cap": ELN}]
    lm_bytes = roundup(q4_chunks(V, H) * CHUNK, MB)
    spec = {"family": "llama3", "hidden": H, "num_layers": L, "layer_types": ["dense"] * L,
            "vocab": V, "real_vocab": V, "num_heads": NH, "num_kv_heads": KVH, "head_dim": HD,
            "rotary_dim": HD, "rope_theta": theta, "qk_norm": False, "attn_gate": False,
            "intermediate": F, "norm_eps": cfg.get("rms_norm_eps", 1e-6), "quant": "q4_1",
            "extra": {"model": "test"}}
    m = {
        "manifest_version": 1,
        "family": "llama3",
        "spec": spec,
        "spec_hash": "sha256:test",
        "build_key": "test",
        "max_ctx_default": max_ctx,
        "hf_config_check": {"model_type": ["llama"], "hidden_size": H, "num_hidden_layers": L,
                            "vocab_size": V, "num_attention_heads": NH,
                            "num_key_value_heads": KVH, "intermediate_size": F},
        "hf_config_defaults": {},
        "layout": {"hidden": H, "vocab": V, "real_vocab": V, "chunk_bytes": CHUNK,
                   "pool_bytes": pool_bytes, "lmhead_pool_bytes": lm_bytes, "kv_row": kv_row,
                   "ptab_row": ptab_row, "rotary_dim": HD, "rope_theta": theta,
                   "rope_inv_freq": inv_freq},
        "layers": ["dense"] * L,
        "contexts": {"dx": "dx/final.xclbin", "ln": "ln/final.xclbin",
                     "lm": "lm_head_q4/final.xclbin"},
        "kernels": {"dx": {"context": "dx", "insts": "dx/insts.bin", "patch": "attnpos",
                           "build": "dx", "window": 0},
                    "ln": {"context": "ln", "insts": "ln/insts.bin", "build": "ln"},
                    "lm": {"context": "lm", "insts": "lm_head_q4/insts.bin",
                           "build": "lm_head_q4"}},
        "layer_types": {"dense": {
            "buffers": {"consts": roundup(2 * ELN + E_A, 4096), "act": roundup(16 * H * 4, 4096),
                        "state": {"kind": "kv", "row": kv_row}},
            "program": [{"op": "run", "kernel": "dx",
                         "args": ["pool", "xres", "consts", "state", "act", "ptab"]}],
            "pack": {"pool": pool, "consts": consts}}},
        "tail": [{"op": "run", "kernel": "ln", "args": ["xres", "zero", "normw", "xresf", "hn"]},
                 {"op": "run", "kernel": "lm", "args": ["lmpool", "hn", "logits"]}],
        "globals": {"xres": H * 4, "zero": H * 4, "normw": H * 2, "xresf": H * 4, "hn": H * 2,
                    "logits": V * 4, "lmpool": lm_bytes,
                    "ptab": {"per_row": ptab_row, "inv_freq": inv_freq, "window": 0}},
        "builds": {},
        "pack": {"pool_bytes": pool_bytes, "chunk_bytes": CHUNK,
                 "lm_head": {"pool_bytes": lm_bytes,
                             "ops": [{"op": "std_perm", "tensor": "lm_head.weight", "dst": 0,
                                      "nch": q4_chunks(V, H), "in_dim": roundup(H, 256)}]},
                 "embed": {"tensor": "model.embed_tokens.weight", "dim": H},
                 "norm": {"tensor": "model.norm.weight", "bytes": H * 2}},
    }
    for s in sets:
        key, val = s.split("=", 1)
        obj = m
        parts = key.split(".")
        for p in parts[:-1]:
            obj = obj[p]
        obj[parts[-1]] = json.loads(val)
    files = {
        "dx/final.xclbin": b"xclbin2\0dx placeholder",
        "ln/final.xclbin": b"xclbin2\0ln placeholder",
        "lm_head_q4/final.xclbin": b"xclbin2\0lm placeholder",
        "dx/insts.bin": attn_stream(kv_row, ptab_row),
        "ln/insts.bin": struct.pack("<8I", 0x06030100, 0, 0, 0, 0x80, 0, 0, 0),
        "lm_head_q4/insts.bin": struct.pack("<8I", 0x06030100, 0, 0, 0, 0x80, 0, 0, 0),
    }
    os.makedirs(out, exist_ok=True)
    for rel, data in files.items():
        if rel in drops:
            continue
        os.makedirs(os.path.dirname(os.path.join(out, rel)), exist_ok=True)
        with open(os.path.join(out, rel), "wb") as f:
            f.write(data)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(m, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
