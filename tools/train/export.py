"""Writes the Hugging Face checkpoint: BF16 model.safetensors (written by hand:
u64 header length, JSON header, data), config.json, generation_config.json,
tokenizer.json, tokenizer_config.json and the official chat_template.jinja."""
import json
import os
import shutil
import struct

import torch

from render import TEMPLATE


def save_safetensors(tensors, path):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to(torch.bfloat16).contiguous()
        b = t.view(torch.int16).numpy().tobytes()
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, v in header.items():
        if name == "__metadata__":
            continue
        a, b = v["data_offsets"]
        assert v["dtype"] == "BF16"
        t = torch.frombuffer(bytearray(data[a:b]), dtype=torch.int16).view(torch.bfloat16)
        out[name] = t.reshape(v["shape"]).float()
    return out


def write_checkpoint(model, tok, out, note):
    os.makedirs(out, exist_ok=True)
    c = model.cfg
    eos = [1, tok.im_end]
    config = {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": eos,
        "head_dim": c.head_dim, "hidden_act": "silu", "hidden_size": c.hidden_size,
        "initializer_range": 0.02, "intermediate_size": c.intermediate_size,
        "max_position_embeddings": c.max_position_embeddings, "mlp_bias": False,
        "model_type": "llama", "num_attention_heads": c.num_attention_heads,
        "num_hidden_layers": c.num_hidden_layers,
        "num_key_value_heads": c.num_key_value_heads, "pad_token_id": 1,
        "pretraining_tp": 1, "rms_norm_eps": c.rms_norm_eps, "rope_scaling": None,
        "rope_theta": c.rope_theta, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "use_cache": True, "vocab_size": c.vocab_size, "minicpmd_trained": note,
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    # max_new_tokens: the daemon's answer length when a request sets none. The
    # demo's longest right answer (a difference worked with thinking) is under 100
    # tokens; a prompt it cannot handle must not run to the context's end.
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"do_sample": True, "temperature": 1.0, "top_p": 0.95, "eos_token_id": eos,
                   "bos_token_id": 0, "pad_token_id": 1, "max_new_tokens": 128}, f, indent=2)
        f.write("\n")
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"add_bos_token": False, "add_eos_token": False, "bos_token": "<s>",
                   "clean_up_tokenization_spaces": False, "eos_token": "</s>",
                   "model_max_length": c.max_position_embeddings, "pad_token": "</s>",
                   "tokenizer_class": "PreTrainedTokenizerFast"}, f, indent=2)
        f.write("\n")
    tok.save(os.path.join(out, "tokenizer.json"))
    shutil.copyfile(TEMPLATE, os.path.join(out, "chat_template.jinja"))
    save_safetensors(model.state_dict(), os.path.join(out, "model.safetensors"))
