"""An induction circuit wired into a fresh model before training.

Every copying skill of the demo (the echoed words, the city in the tool call,
the name in the JSON, the temperature after the tool) needs an induction head:
"find where the current token stood before and say what followed it". Small
models form one late and abruptly; on this corpus, in this time budget, it did
not form (tools/train/README.md). So the recipe starts with one already there,
as a few structured weights in a randomly initialised model, and training
adapts it like any other weight:

  layer 0, head 0      attends to the previous token: its query and key read a
                       constant direction of the embedding, in the fastest RoPE
                       pairs, with phases fitted so the score peaks one position
                       back; it writes that token's identity (a random
                       projection R of the embedding) into the "previous token"
                       dimensions, which the embedding leaves at zero;
  layer 1, query head 2 (KV head 1)
                       attends to the position whose previous token is the
                       current token: query R(current token), key the "previous
                       token" dimensions, both in the slowest RoPE pairs (so the
                       match does not depend on the distance); it writes the
                       attended token's own embedding, which the untied head,
                       started as a copy of the embedding, reads as that
                       token's logit.

Nothing else changes: the architecture is the plain MiniCPM5-family Llama that
minicpmd serves; only the starting point differs."""
import math

import torch


def _fit_prev_token(cfg, pairs, n=512, steps=400):
    """Constant query and key vectors (head_dim) whose RoPE score peaks one
    position back, for every distance up to n."""
    D = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    g = torch.Generator().manual_seed(0)
    qa = torch.randn(pairs, generator=g, dtype=torch.float64)
    qb = torch.randn(pairs, generator=g, dtype=torch.float64)
    ka = torch.randn(pairs, generator=g, dtype=torch.float64)
    kb = torch.randn(pairs, generator=g, dtype=torch.float64)
    ps = [qa, qb, ka, kb]
    for p in ps:
        p.requires_grad_(True)
    opt = torch.optim.Adam(ps, lr=0.05)
    delta = torch.arange(n, dtype=torch.float64)
    w = inv[:pairs]
    for _ in range(steps):
        # NeoX pair i is (i, i + D/2); rotating q by t and k by j leaves the
        # score a function of t - j: sum (qa ka + qb kb) cos - (qb ka - qa kb) sin.
        ang = torch.outer(delta, w)
        s = ((qa * ka + qb * kb) * ang.cos() - (qb * ka - qa * kb) * ang.sin()).sum(-1)
        s = s / math.sqrt(D)
        # a query at position t sees distances 0..t: each prefix must put its mass on 1
        loss = 0.0
        for t in (1, 2, 3, 5, 8, 16, 40, 100, 250, n - 1):
            loss = loss - torch.log_softmax(s[:t + 1], 0)[1]
        opt.zero_grad()
        loss.backward()
        opt.step()
    q = torch.zeros(D)
    k = torch.zeros(D)
    h = D // 2
    q[:pairs], q[h:h + pairs] = qa.detach().float(), qb.detach().float()
    k[:pairs], k[h:h + pairs] = ka.detach().float(), kb.detach().float()
    return q, k


@torch.no_grad()
def wire_induction(model, gain=3.0, write=0.12, emb_std=0.08, out=16.0, seed=0):
    """Wire the circuit into a freshly initialised model, in place; returns the
    layer-1 query head used. gain: the induction query's scale (a match scores
    about 4 * gain); write: how strongly the previous token is written; emb_std:
    the embedding's new scale; out: the copied token's strength in the stream.
    Checked at step 0 on a repeated random string (README: 96-98 % copied)."""
    cfg = model.cfg
    E, D, H, K = cfg.hidden_size, cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
    if cfg.num_hidden_layers < 2 or K < 2 or D < 16 or E < 4 * D:
        raise ValueError("wire_induction needs 2 layers, 2 KV heads, head_dim >= 16, "
                         "hidden >= 4 head_dim")
    npv = min(32, D // 2)
    CONST = E - 1                      # carries a constant: the position query's source
    PREV = slice(E // 2, E // 2 + npv)  # the previous token's identity
    g = torch.Generator().manual_seed(seed)
    emb = model.model.embed_tokens.weight
    # A larger embedding than the usual 0.02, so the token's identity is not
    # drowned at layer 1 by the other heads' and the MLP's random outputs.
    emb *= emb_std / float(emb.std())
    emb[:, PREV] = 0.0
    emb[:, CONST] = 2.5 * emb_std
    tok = torch.ones(E, dtype=torch.bool)
    tok[PREV] = False
    tok[CONST] = False
    R = torch.zeros(npv, E)                  # token identity -> npv numbers
    R[:, tok] = torch.randn(npv, int(tok.sum()), generator=g) / math.sqrt(int(tok.sum()))

    # x at the first RMSNorm: the CONST entry divided by the embedding's rms.
    rms = float(emb.pow(2).mean().sqrt())
    cval = float(emb[0, CONST]) / rms
    a0 = model.model.layers[0].self_attn
    with torch.enable_grad():
        q, k = _fit_prev_token(cfg, pairs=min(6, D // 4))
    a0.q_proj.weight[0:D] = 0.0
    a0.q_proj.weight[0:D, CONST] = q / cval
    a0.k_proj.weight[0:D] = 0.0
    a0.k_proj.weight[0:D, CONST] = k / cval
    # V (KV head 0): R x into the head's last npv dims; O (query head 0): to PREV.
    a0.v_proj.weight[0:D] = 0.0
    a0.v_proj.weight[D - npv:D] = R
    a0.o_proj.weight[:, 0:D] = 0.0
    a0.o_proj.weight[PREV, D - npv:D] = torch.eye(npv) * write

    # Layer 1: query head 2 uses KV head 1 (H / K query heads per KV head).
    hq, kvh = H // K, 1
    a1 = model.model.layers[1].self_attn
    slow = list(range(D // 2 - npv // 2, D // 2)) + list(range(D - npv // 2, D))  # slowest pairs
    qrows = [hq * D + i for i in slow]
    krows = [kvh * D + i for i in slow]
    a1.q_proj.weight[hq * D:(hq + 1) * D] = 0.0
    a1.q_proj.weight[qrows] = R * gain
    a1.k_proj.weight[kvh * D:(kvh + 1) * D] = 0.0
    # the PREV entries at layer 1's norm are about write / rms of the stream
    a1.k_proj.weight[krows, PREV] = torch.eye(npv) * (rms / write)
    # V: the attended token's embedding (D random directions); O back to the stream.
    P = torch.randn(D, E, generator=g) / math.sqrt(E)
    P[:, ~tok] = 0.0
    a1.v_proj.weight[kvh * D:(kvh + 1) * D] = P
    a1.o_proj.weight[:, hq * D:(hq + 1) * D] = P.t() * (rms * out)
    return hq
