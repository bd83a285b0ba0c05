"""A MiniCPM5-family Llama in plain PyTorch, laid out as transformers'
LlamaForCausalLM (same tensor names): untied lm_head, NeoX (half-rotation) RoPE,
RMSNorm (plain w * x_hat), SwiGLU MLP, GQA (query head h uses KV head
h // (n_heads / n_kv_heads)), no biases, attention scale 1/sqrt(head_dim)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Config:
    def __init__(self, vocab_size=2048, hidden_size=256, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                 intermediate_size=768, rope_theta=5e6, rms_norm_eps=1e-6,
                 max_position_embeddings=4096):
        self.__dict__.update(locals())
        del self.__dict__["self"]


def fake_q4_1(w):
    """Q4_1 as minicpmd-pack convert quantizes (groups of 32 along the input dim,
    min and (max-min)/15), with a straight-through gradient."""
    rows, cols = w.shape
    g = w.reshape(rows, cols // 32, 32)
    mn = g.amin(-1, keepdim=True)
    d = (g.amax(-1, keepdim=True) - mn) / 15
    q = torch.clamp(torch.floor((g - mn) / torch.where(d == 0, torch.ones_like(d), d) + 0.5), 0, 15)
    deq = (q * d + mn).reshape(rows, cols)
    return w + (deq - w).detach()


class Linear(nn.Linear):
    qat = False

    def forward(self, x):
        w = fake_q4_1(self.weight) if Linear.qat else self.weight
        return F.linear(x, w)


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rope_tables(cfg, n, device=None):
    hd = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    t = torch.arange(n, dtype=torch.float64)
    f = torch.outer(t, inv)
    emb = torch.cat([f, f], -1)
    return emb.cos().float(), emb.sin().float()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], -1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        H, K, D, E = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.hidden_size
        self.q_proj = Linear(E, H * D, bias=False)
        self.k_proj = Linear(E, K * D, bias=False)
        self.v_proj = Linear(E, K * D, bias=False)
        self.o_proj = Linear(H * D, E, bias=False)

    def forward(self, x, cos, sin, mask, past=None):
        B, T, _ = x.shape
        c = self.cfg
        H, K, D = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        q = self.q_proj(x).view(B, T, H, D).transpose(1, 2)
        k = self.k_proj(x).view(B, T, K, D).transpose(1, 2)
        v = self.v_proj(x).view(B, T, K, D).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        self.kv = (k, v)
        if past is not None:  # a shared prefix (batch 1): every row attends to it
            k = torch.cat([past[0].expand(B, -1, -1, -1), k], 2)
            v = torch.cat([past[1].expand(B, -1, -1, -1), v], 2)
        k = k.repeat_interleave(H // K, dim=1)
        v = v.repeat_interleave(H // K, dim=1)
        s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(D)) + mask
        o = torch.softmax(s, -1) @ v
        return self.o_proj(o.transpose(1, 2).reshape(B, T, H * D))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        E, F_ = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = Linear(E, F_, bias=False)
        self.up_proj = Linear(E, F_, bias=False)
        self.down_proj = Linear(F_, E, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, mask, past=None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, past)
        return x + self.mlp(self.post_attention_layernorm(x))


class Inner(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([Layer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Inner(cfg)
        self.lm_head = Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.apply(self._init)
        for n, p in self.named_parameters():   # GPT-2-style scaled residual projections
            if n.endswith("o_proj.weight") or n.endswith("down_proj.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * cfg.num_hidden_layers))

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def hidden(self, ids, prefix=None):
        """Final hidden states of ids [B, T]; with prefix [1, P], ids continue
        it (the prefix is computed once and shared by the B rows)."""
        B, T = ids.shape
        pasts = [None] * len(self.model.layers)
        P = 0
        if prefix is not None:
            P = prefix.shape[1]
            cos, sin = rope_tables(self.cfg, P)
            x = self.model.embed_tokens(prefix)
            mask = torch.full((P, P), float("-inf")).triu(1)
            for i, layer in enumerate(self.model.layers):
                x = layer(x, cos, sin, mask)
                pasts[i] = layer.self_attn.kv
        cos, sin = rope_tables(self.cfg, P + T)
        cos, sin = cos[P:], sin[P:]
        mask = torch.full((T, P + T), float("-inf")).triu(P + 1)
        x = self.model.embed_tokens(ids)
        for i, layer in enumerate(self.model.layers):
            x = layer(x, cos, sin, mask, pasts[i])
        return self.model.norm(x)

    def forward(self, ids, prefix=None):
        return self.lm_head(self.hidden(ids, prefix))

    @torch.no_grad()
    def generate(self, ids, max_new, stop):
        """Greedy decoding without a KV cache (tests and spot checks only)."""
        out = list(ids)
        for _ in range(max_new):
            logits = self.forward(torch.tensor([out]))[0, -1]
            t = int(logits.argmax())
            out.append(t)
            if t in stop:
                break
        return out[len(ids):]
