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
                       token's logit;
and with two_back (the recipe's --two-back) a second path for a piece that
stands twice in a word (Plo-v-di-v, ri-b-b-on, L-j-ub-l-j-ana), where the
previous token alone has two places to continue from:
  layer 0, head 1      shares head 0's key and value (KV head 0) with a query
                       fitted to peak two positions back, and writes that
                       token's identity into 16 more free dimensions;
  layer 1, query head 0 (KV head 0)
                       matches the current token against each position's
                       previous token and the previous token against each
                       position's token two back, half the slowest pairs each,
                       and writes the attended token as head 2 does.
At step 0, on strings of 16 distinct tokens (repeats within a string), the
one-token match copies 65 % of the tokens right and both together 93 %.

Nothing else changes: the architecture is the plain MiniCPM5-family Llama that
minicpmd serves; only the starting point differs."""
import math

import torch


def _fit_back(cfg, pairs, back=(1,), n=512, steps=400):
    """One constant key vector and a constant query vector per distance in
    back (head_dim each) such that query i's RoPE score against the key peaks
    back[i] positions back, for every distance up to n. The key is shared:
    layer 0's query heads 0 and 1 read one KV head."""
    D = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    g = torch.Generator().manual_seed(0)
    ka = torch.randn(pairs, generator=g, dtype=torch.float64)
    kb = torch.randn(pairs, generator=g, dtype=torch.float64)
    qs = [(torch.randn(pairs, generator=g, dtype=torch.float64),
           torch.randn(pairs, generator=g, dtype=torch.float64)) for _ in back]
    ps = [ka, kb] + [p for q in qs for p in q]
    for p in ps:
        p.requires_grad_(True)
    opt = torch.optim.Adam(ps, lr=0.05)
    delta = torch.arange(n, dtype=torch.float64)
    w = inv[:pairs]
    for _ in range(steps):
        # NeoX pair i is (i, i + D/2); rotating q by t and k by j leaves the
        # score a function of t - j: sum (qa ka + qb kb) cos - (qb ka - qa kb) sin.
        ang = torch.outer(delta, w)
        loss = 0.0
        for (qa, qb), b in zip(qs, back):
            s = ((qa * ka + qb * kb) * ang.cos() - (qb * ka - qa * kb) * ang.sin()).sum(-1)
            s = s / math.sqrt(D)
            # a query at position t sees distances 0..t: each prefix must put its mass on b
            for t in (1, 2, 3, 5, 8, 16, 40, 100, 250, n - 1):
                if t >= b:
                    loss = loss - torch.log_softmax(s[:t + 1], 0)[b]
        opt.zero_grad()
        loss.backward()
        opt.step()
    h = D // 2

    def full(a, b_):
        v = torch.zeros(D)
        v[:pairs], v[h:h + pairs] = a.detach().float(), b_.detach().float()
        return v
    return [full(qa, qb) for qa, qb in qs], full(ka, kb)


def _slow_dims(D, lo, hi):
    """Head dims of the NeoX RoPE pairs lo..hi-1 (pair i is dims i and i + D/2)."""
    return list(range(lo, hi)) + list(range(D // 2 + lo, D // 2 + hi))


@torch.no_grad()
def wire_induction(model, gain=3.0, write=0.12, emb_std=0.08, out=16.0, seed=0,
                   two_back=False):
    """Wire the circuit into a freshly initialised model, in place; returns the
    layer-1 query head used. gain: the induction query's scale (a match scores
    about 4 * gain); write: how strongly the previous token is written; emb_std:
    the embedding's new scale; out: the copied token's strength in the stream.
    two_back: also wire the two-token circuit (layer 0 head 1, layer 1 head 0).
    smoke.py measures both at step 0 (copy_accuracy)."""
    cfg = model.cfg
    E, D, H, K = cfg.hidden_size, cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
    if cfg.num_hidden_layers < 2 or K < 2 or D < 16 or E < 4 * D or (two_back and H // K < 2):
        raise ValueError("wire_induction needs 2 layers, 2 KV heads (of 2 query heads for "
                         "two_back), "
                         "head_dim >= 16, hidden >= 4 head_dim")
    npv = min(32, D // 2)
    n2 = npv // 2                      # dims per token in the two-token match
    CONST = E - 1                      # carries a constant: the position query's source
    PREV = slice(E // 2, E // 2 + npv)  # the previous token's identity
    PREV2 = slice(E // 2 + npv, E // 2 + npv + n2)  # the one before, fewer dims
    g = torch.Generator().manual_seed(seed)
    emb = model.model.embed_tokens.weight
    # A larger embedding than the usual 0.02, so the token's identity is not
    # drowned at layer 1 by the other heads' and the MLP's random outputs.
    emb *= emb_std / float(emb.std())
    emb[:, PREV] = 0.0
    if two_back:
        emb[:, PREV2] = 0.0
    emb[:, CONST] = 2.5 * emb_std
    tok = torch.ones(E, dtype=torch.bool)
    tok[PREV] = False
    if two_back:
        tok[PREV2] = False
    tok[CONST] = False
    R = torch.zeros(npv, E)                  # token identity -> npv numbers
    R[:, tok] = torch.randn(npv, int(tok.sum()), generator=g) / math.sqrt(int(tok.sum()))

    # x at the first RMSNorm: the CONST entry divided by the embedding's rms.
    rms = float(emb.pow(2).mean().sqrt())
    cval = float(emb[0, CONST]) / rms
    a0 = model.model.layers[0].self_attn
    with torch.enable_grad():
        qs, k = _fit_back(cfg, pairs=min(6, D // 4), back=(1, 2) if two_back else (1,))
    # Layer 0, KV head 0: key and value; query head 0 one back, head 1 two back.
    a0.k_proj.weight[0:D] = 0.0
    a0.k_proj.weight[0:D, CONST] = k / cval
    # V: R x into the head's last npv dims; O: head 0 to PREV, head 1 to PREV2.
    a0.v_proj.weight[0:D] = 0.0
    a0.v_proj.weight[D - npv:D] = R
    for h, q in enumerate(qs):
        a0.q_proj.weight[h * D:(h + 1) * D] = 0.0
        a0.q_proj.weight[h * D:(h + 1) * D, CONST] = q / cval
        a0.o_proj.weight[:, h * D:(h + 1) * D] = 0.0
    a0.o_proj.weight[PREV, D - npv:D] = torch.eye(npv) * write
    if two_back:
        a0.o_proj.weight[PREV2, 2 * D - npv:2 * D - npv + n2] = torch.eye(n2) * write

    # Layer 1: query head 2 uses KV head 1 (H / K query heads per KV head):
    # the current token against the previous token of every position, in the
    # slowest RoPE pairs (so the match does not depend on the distance).
    hq, kvh = H // K, 1
    a1 = model.model.layers[1].self_attn
    slow = _slow_dims(D, D // 2 - npv // 2, D // 2)
    a1.q_proj.weight[hq * D:(hq + 1) * D] = 0.0
    a1.q_proj.weight[[hq * D + i for i in slow]] = R * gain
    a1.k_proj.weight[kvh * D:(kvh + 1) * D] = 0.0
    # the PREV entries at layer 1's norm are about write / rms of the stream
    a1.k_proj.weight[[kvh * D + i for i in slow], PREV] = torch.eye(npv) * (rms / write)
    # V: the attended token's embedding (D random directions); O back to the stream.
    P = torch.randn(D, E, generator=g) / math.sqrt(E)
    P[:, ~tok] = 0.0
    a1.v_proj.weight[kvh * D:(kvh + 1) * D] = P
    a1.o_proj.weight[:, hq * D:(hq + 1) * D] = P.t() * (rms * out)
    if two_back:
        # Query head 0 (KV head 0) matches two tokens: the current one against
        # each position's previous token (A), the previous one against each
        # position's token two back (B), half the slow pairs each. Where a
        # piece stands twice in a word (Plo v di v, ri b b on) only the pair
        # tells which continuation is meant.
        A = _slow_dims(D, D // 2 - n2 // 2, D // 2)
        B = _slow_dims(D, D // 2 - n2, D // 2 - n2 // 2)
        a1.q_proj.weight[0:D] = 0.0
        a1.q_proj.weight[A] = R[:n2] * gain
        a1.q_proj.weight[B, PREV.start:PREV.start + n2] = torch.eye(n2) * (rms / write) * gain
        a1.k_proj.weight[0:D] = 0.0
        a1.k_proj.weight[A, PREV.start:PREV.start + n2] = torch.eye(n2) * (rms / write)
        a1.k_proj.weight[B, PREV2] = torch.eye(n2) * (rms / write)
        P2 = torch.randn(D, E, generator=g) / math.sqrt(E)
        P2[:, ~tok] = 0.0
        a1.v_proj.weight[0:D] = P2
        a1.o_proj.weight[:, 0:D] = P2.t() * (rms * out)
    return hq


@torch.no_grad()
def copy_accuracy(model, alphabet, n=200, width=12, seed=1):
    """Teacher-forced accuracy on the second copy of random token strings
    (marker, string, marker, the string again), its first token excluded;
    drawn from `alphabet` (a small one makes pieces repeat inside a string)."""
    import random
    rng = random.Random(seed)
    right = total = 0
    for _ in range(n):
        w = [rng.choice(alphabet) for _ in range(width)]
        s = [2] + w + [3] + w
        logits = model(torch.tensor([s]))[0]
        for j in range(width + 2, len(s) - 1):
            right += int(logits[j].argmax()) == s[j + 1]
            total += 1
    return right / total

