#!/usr/bin/env python3
"""Reference logits for moeserve's DeepSeek-V3 CPU runner and MTP drafter, from transformers' DeepseekV3ForCausalLM.

Run on the GPU host (PyTorch and transformers are there; nothing here needs a GPU: the reference runs in fp32 on the
CPU with eager attention). For each checkpoint written by `moeserve make-tiny --family deepseek-v3 ARGS`:
  - the FP8 e4m3 weights are dequantised by hand (value x its 128 x 128 block's scale_inv, in fp32, as the
    checkpoint defines them; transformers' own FP8 path refuses dimensions that are not multiples of 128) and
    loaded with every other tensor into DeepseekV3ForCausalLM built from config.json without quantization_config;
  - a plain torch re-implementation of the same model (float64, no transformers module) checks the loading, the
    fused-expert layout of transformers 5 and the RoPE pairing: its logits must agree;
  - logits are written for prompts of lengths 1, 7, 40 and 100, for a left-padded batch of three lengths (checked
    against the prompts run alone), and greedy continuations of 32 tokens (the whole sequence re-run per step);
  - transformers has no MTP forward (it ignores model.layers.<num_hidden_layers>.*), so the MTP head is assembled
    from its modules: two DeepseekV3RMSNorm (enorm, hnorm), Linear(2H, H) eh_proj, DeepseekV3DecoderLayer(config,
    layer_idx=num_hidden_layers) (MoE), a third RMSNorm (shared_head.norm) and the head. It is fed the model's
    last_hidden_state (after model.norm) and the embedding of the next token, the embedding first; positions are
    the target's. Written: its logits at every position of two prompts, and a greedy chain of 3 drafts in which each
    step feeds back the module's own output after shared_head.norm;
  - the model's YaRN inverse frequencies, cos/sin scaling and softmax scale, and the smallest router margins (how
    close the chosen experts and groups came to a tie).
Logits are stored whole for a small vocabulary; for the full vocabulary a fixed sample of ids plus each argmax.

Usage: deepseek_v3_logits.py --out DIR --model NAME=CHECKPOINT_DIR=MAKE_TINY_ARGS ... (MAKE_TINY_ARGS space-separated,
without --family). Writes DIR/deepseek_v3_logits.json (metadata, prompts, offsets) and DIR/deepseek_v3_logits.bin
(float32 little-endian), and prints what it wrote.
"""
import argparse
import datetime
import hashlib
import json
import math
import os
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import load_file
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as hf

SAMPLED_IDS = 1024
GREEDY_TOKENS = 32
CHAIN_STEPS = 3


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_tensors(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    tensors = {}
    for f in files:
        tensors.update(load_file(os.path.join(model_dir, f)))
    return tensors


def dequantize(tensors, block):
    """FP8 weights x their block scales in fp32; every other tensor as fp32. Scale tensors are consumed."""
    out = {}
    for name, t in tensors.items():
        if name.endswith("_scale_inv"):
            continue
        if t.dtype == torch.float8_e4m3fn:
            rows, cols = t.shape
            s = tensors[name + "_scale_inv"].float()
            s = s.repeat_interleave(block[0], 0).repeat_interleave(block[1], 1)[:rows, :cols]
            out[name] = t.float() * s
        else:
            out[name] = t.float()
    return out


def hf_config(cfg):
    cfg = dict(cfg)
    cfg.pop("quantization_config", None)
    config = DeepseekV3Config(**cfg)
    config._attn_implementation = "eager"
    assert getattr(config, "rope_interleave", True), "rope_interleave must be true for DeepSeek checkpoints"
    return config


def layer_state(dense, prefix, expected):
    """The tensors under `prefix` renamed to a module's keys (expected: its state_dict), fusing the per-expert
    projections when this transformers fuses experts ([E, 2I, H] gate rows first, down [E, H, I]; transposed if the
    module wants the other order)."""
    state = {k[len(prefix):]: v for k, v in dense.items() if k.startswith(prefix)}
    fused_key = "mlp.experts.gate_up_proj"
    if fused_key in expected:
        n = 0
        while f"mlp.experts.{n}.gate_proj.weight" in state:
            n += 1
        gate_up = torch.stack([torch.cat([state.pop(f"mlp.experts.{e}.gate_proj.weight"),
                                          state.pop(f"mlp.experts.{e}.up_proj.weight")], 0) for e in range(n)])
        down = torch.stack([state.pop(f"mlp.experts.{e}.down_proj.weight") for e in range(n)])
        for key, value in ((fused_key, gate_up), ("mlp.experts.down_proj", down)):
            want = tuple(expected[key].shape)
            state[key] = value if tuple(value.shape) == want else value.transpose(1, 2).contiguous()
            assert tuple(state[key].shape) == want, (key, tuple(value.shape), want)
    return state


def load_model(config, dense, num_layers):
    model = DeepseekV3ForCausalLM(config).float().eval()
    expected = model.state_dict()
    state = {}
    for name in ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]:
        state[name] = dense[name]
    for i in range(num_layers):
        prefix = f"model.layers.{i}."
        sub = {k[len(prefix):]: v for k, v in expected.items() if k.startswith(prefix)}
        for k, v in layer_state(dense, prefix, sub).items():
            state[prefix + k] = v
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    assert all("rotary" in m for m in missing), missing
    return model


# ------------------------------------------------------------------------------------------ plain re-implementation

def manual_logits(cfg, dense, ids):
    """The model in float64 from the checkpoint's tensors, no transformers module: DeepSeek's adjacent-pair RoPE,
    naive MLA, the noaux_tc router; a second reading to catch a loading or layout mistake."""
    d = {k: v.double() for k, v in dense.items()}
    H, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    heads, nope, rd, vd, kvl = (cfg[k] for k in ("num_attention_heads", "qk_nope_head_dim", "qk_rope_head_dim",
                                                 "v_head_dim", "kv_lora_rank"))
    eps = cfg["rms_norm_eps"]
    rope = cfg["rope_scaling"]
    theta = cfg["rope_theta"]

    def norm(x, w, e=eps):
        return w * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + e))

    def mscale(scale, m):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    j = torch.arange(rd // 2, dtype=torch.float64)
    base = 1.0 / theta ** (2 * j / rd)
    inv = base
    factor_cos = 1.0
    scale = (nope + rd) ** -0.5
    if rope:
        f, orig = rope["factor"], rope["original_max_position_embeddings"]

        def corr(r):
            return rd * math.log(orig / (r * 2 * math.pi)) / (2 * math.log(theta))
        low, high = max(math.floor(corr(rope["beta_fast"])), 0), min(math.ceil(corr(rope["beta_slow"])), rd - 1)
        ramp = ((j - low) / (high - low if high != low else 0.001)).clamp(0, 1)
        inv = base / f * ramp + base * (1 - ramp)
        factor_cos = mscale(f, rope["mscale"]) / mscale(f, rope["mscale_all_dim"])
        scale *= mscale(f, rope["mscale_all_dim"]) ** 2

    def rotate(x, pos):  # x [..., n, rd], pairs (2j, 2j+1)
        ang = pos[:, None] * inv[None, :]
        c, s = torch.cos(ang) * factor_cos, torch.sin(ang) * factor_cos
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = x0 * c - x1 * s
        out[..., 1::2] = x1 * c + x0 * s
        return out

    def mlp(prefix, x):
        g, u = x @ d[prefix + "gate_proj.weight"].T, x @ d[prefix + "up_proj.weight"].T
        return (g * torch.sigmoid(g) * u) @ d[prefix + "down_proj.weight"].T

    n = len(ids)
    pos = torch.arange(n, dtype=torch.float64)
    x = d["model.embed_tokens.weight"][ids]
    for i in range(L):
        p = f"model.layers.{i}."
        a = p + "self_attn."
        h = norm(x, d[p + "input_layernorm.weight"])
        if cfg["q_lora_rank"]:
            q = norm(h @ d[a + "q_a_proj.weight"].T, d[a + "q_a_layernorm.weight"], 1e-6) @ d[a + "q_b_proj.weight"].T
        else:
            q = h @ d[a + "q_proj.weight"].T
        q = q.view(n, heads, nope + rd).transpose(0, 1)
        kva = h @ d[a + "kv_a_proj_with_mqa.weight"].T
        kv = (norm(kva[:, :kvl], d[a + "kv_a_layernorm.weight"], 1e-6) @ d[a + "kv_b_proj.weight"].T)
        kv = kv.view(n, heads, nope + vd).transpose(0, 1)
        k_pe = rotate(kva[:, kvl:], pos)
        qq = torch.cat([q[..., :nope], rotate(q[..., nope:], pos)], -1)
        kk = torch.cat([kv[..., :nope], k_pe[None].expand(heads, n, rd)], -1)
        s = (qq @ kk.transpose(1, 2)) * scale + torch.full((n, n), -math.inf, dtype=torch.float64).triu(1)
        o = torch.softmax(s, -1) @ kv[..., nope:]
        x = x + o.transpose(0, 1).reshape(n, heads * vd) @ d[a + "o_proj.weight"].T
        h = norm(x, d[p + "post_attention_layernorm.weight"])
        if i < cfg["first_k_dense_replace"]:
            x = x + mlp(p + "mlp.", h)
            continue
        E, G, K = cfg["n_routed_experts"], cfg["n_group"], cfg["num_experts_per_tok"]
        sc = torch.sigmoid(h @ d[p + "mlp.gate.weight"].T)
        choice = sc + d[p + "mlp.gate.e_score_correction_bias"]
        groups = choice.view(n, G, E // G).topk(2, -1)[0].sum(-1)
        keep = torch.zeros(n, G, dtype=torch.bool)
        keep.scatter_(1, groups.topk(cfg["topk_group"], -1)[1], True)
        masked = choice.masked_fill(~keep.repeat_interleave(E // G, 1), -math.inf)
        top = masked.topk(K, -1)[1]
        w = sc.gather(1, top)
        w = w / (w.sum(-1, keepdim=True) + 1e-20) * cfg["routed_scaling_factor"]
        out = mlp(p + "mlp.shared_experts.", h)
        for t in range(n):
            for k in range(K):
                out[t] += w[t, k] * mlp(f"{p}mlp.experts.{int(top[t, k])}.", h[t:t + 1])[0]
        x = x + out
    return (norm(x, d["model.norm.weight"]) @ d["lm_head.weight"].T).float()


# ----------------------------------------------------------------------------------------------------- the model

@torch.no_grad()
def all_logits(model, ids):
    out = model(input_ids=torch.tensor([ids]), use_cache=False, output_hidden_states=False)
    return out.logits[0].float()


@torch.no_grad()
def last_hidden(model, ids):
    return model.model(input_ids=torch.tensor([ids]), use_cache=False).last_hidden_state[0].float()


@torch.no_grad()
def batch_logits(model, prompts):
    """Left-padded batch with attention mask and explicit positions."""
    n = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), n, dtype=torch.long)
    mask = torch.zeros(len(prompts), n, dtype=torch.long)
    pos = torch.zeros(len(prompts), n, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, n - len(p):] = torch.tensor(p)
        mask[i, n - len(p):] = 1
        pos[i, n - len(p):] = torch.arange(len(p))
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False)
    return [out.logits[i, n - len(p):].float() for i, p in enumerate(prompts)]


@torch.no_grad()
def greedy(model, ids, steps):
    seq = list(ids)
    for _ in range(steps):
        seq.append(int(all_logits(model, seq)[-1].argmax()))
    return seq[len(ids):]


def router_margins(model, ids, cfg):
    """Smallest gaps, over MoE layers and tokens, between the last chosen expert's choice score and the next one,
    and between the last kept group's score and the next one."""
    gaps = {"expert": math.inf, "group": math.inf}
    E, G, K, TG = cfg["n_routed_experts"], cfg["n_group"], cfg["num_experts_per_tok"], cfg["topk_group"]

    def hook(module, args):
        if not hasattr(module, "e_score_correction_bias"):
            return
        x = args[0].reshape(-1, cfg["hidden_size"]).float()
        choice = torch.sigmoid(x @ module.weight.float().T) + module.e_score_correction_bias.float()
        groups = choice.view(-1, G, E // G).topk(2, -1)[0].sum(-1).sort(-1, descending=True)[0]
        gaps["group"] = min(gaps["group"], float((groups[:, TG - 1] - groups[:, TG]).min())) if TG < G else gaps["group"]
        keep = torch.zeros(x.shape[0], G, dtype=torch.bool)
        keep.scatter_(1, choice.view(-1, G, E // G).topk(2, -1)[0].sum(-1).topk(TG, -1)[1], True)
        masked = choice.masked_fill(~keep.repeat_interleave(E // G, 1), -math.inf).sort(-1, descending=True)[0]
        gaps["expert"] = min(gaps["expert"], float((masked[:, K - 1] - masked[:, K]).min()))

    handles = [layer.mlp.gate.register_forward_pre_hook(hook) for layer in model.model.layers
               if hasattr(layer.mlp, "gate")]
    all_logits(model, ids)
    for h in handles:
        h.remove()
    return gaps


class Mtp(torch.nn.Module):
    """The MTP head assembled from transformers' modules (transformers itself ignores the layer)."""

    def __init__(self, config, dense, model):
        super().__init__()
        L, H = config.num_hidden_layers, config.hidden_size
        p = f"model.layers.{L}."
        self.enorm = hf.DeepseekV3RMSNorm(H, eps=config.rms_norm_eps)
        self.hnorm = hf.DeepseekV3RMSNorm(H, eps=config.rms_norm_eps)
        self.head_norm = hf.DeepseekV3RMSNorm(H, eps=config.rms_norm_eps)
        self.eh_proj = torch.nn.Linear(2 * H, H, bias=False)
        self.layer = hf.DeepseekV3DecoderLayer(config, layer_idx=L)
        self.enorm.weight.data = dense[p + "enorm.weight"]
        self.hnorm.weight.data = dense[p + "hnorm.weight"]
        self.head_norm.weight.data = dense[p + "shared_head.norm.weight"]
        self.eh_proj.weight.data = dense[p + "eh_proj.weight"]
        state = layer_state(dense, p, self.layer.state_dict())
        own = ("enorm.", "hnorm.", "eh_proj.", "shared_head.", "embed_tokens.")  # the module's, not the layer's
        missing, unexpected = self.layer.load_state_dict(
            {k: v for k, v in state.items() if not k.startswith(own)}, strict=False)
        assert not unexpected and not missing, (missing, unexpected)
        self.embed = dense.get(p + "embed_tokens.weight", dense["model.embed_tokens.weight"])
        self.head = dense.get(p + "shared_head.head.weight", dense["lm_head.weight"])
        self.rotary = model.model.rotary_emb
        self.float().eval()

    @torch.no_grad()
    def forward(self, hidden, tokens):
        """hidden [n, H] and next tokens [n] at positions 0..n-1 -> (logits [n, V], outputs after head norm [n, H])."""
        n = len(tokens)
        z = self.eh_proj(torch.cat([self.enorm(self.embed[tokens]), self.hnorm(hidden)], -1))[None]
        pos = torch.arange(n)[None]
        cos, sin = self.rotary(z, pos)
        mask = torch.full((n, n), torch.finfo(torch.float32).min).triu(1)[None, None]
        y = self.layer(z, attention_mask=mask, position_ids=pos, position_embeddings=(cos, sin))
        y = y[0] if isinstance(y, tuple) else y
        out = self.head_norm(y[0] if y.dim() == 3 else y)
        return out @ self.head.T, out


# ----------------------------------------------------------------------------------------------------------- main

def rel(a, b):
    return float((a - b).norm() / b.norm())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", action="append", required=True, help="NAME=DIR=MAKE_TINY_ARGS")
    args = ap.parse_args()
    torch.manual_seed(0)
    blob = bytearray()
    meta = {"generator": "tools/oracle/deepseek_v3_logits.py", "date": datetime.date.today().isoformat(),
            "torch": torch.__version__, "transformers": transformers.__version__, "models": {}}

    def put(t):
        off = len(blob) // 4
        blob.extend(t.detach().cpu().numpy().astype("<f4").tobytes())
        return off

    for spec in args.model:
        name, model_dir, make_args = spec.split("=", 2)
        cfg = json.load(open(os.path.join(model_dir, "config.json")))
        vocab, L = cfg["vocab_size"], cfg["num_hidden_layers"]
        block = cfg.get("quantization_config", {}).get("weight_block_size", [128, 128])
        dense = dequantize(load_tensors(model_dir), block)
        config = hf_config(cfg)
        model = load_model(config, dense, L)
        rng = np.random.default_rng(1234)
        prompt_vocab = min(vocab, 128000)  # DeepSeek-V3's mergeable ids when the vocabulary is the real one
        lengths = {"len1": 1, "len7": 7, "len40": 40, "len100": 100}
        singles = {k: rng.integers(0, prompt_vocab, n).tolist() for k, n in lengths.items()}
        batch = [rng.integers(0, prompt_vocab, n).tolist() for n in (12, 45, 3)]
        full = vocab <= 4096
        sample = None if full else np.sort(rng.choice(vocab, SAMPLED_IDS, replace=False)).tolist()
        rot = model.model.rotary_emb
        entry = {"make_tiny_args": make_args.split() if make_args else [],
                 "files": {f: sha256(os.path.join(model_dir, f)) for f in sorted(os.listdir(model_dir))
                           if f.endswith(".safetensors") or f.endswith(".json")},
                 "vocab_size": vocab, "logit_ids": "all" if full else sample,
                 "rope": {"inv_freq": rot.inv_freq.float().tolist(), "attention_scaling": float(rot.attention_scaling),
                          "softmax_scale": float(model.model.layers[0].self_attn.scaling)},
                 "cases": [], "mtp": []}

        def row(lg):
            return {"offset": put(lg if full else lg[..., sample]), "argmax": lg.argmax(-1).tolist()}

        def record(case, prompts, logits_list):
            entry["cases"].append({"name": case, "sequences": [dict(prompt=p, **row(lg))
                                                               for p, lg in zip(prompts, logits_list)]})

        checks = {}
        for case, p in singles.items():
            lg = all_logits(model, p)
            if len(p) <= 40:
                checks[f"{case} manual max rel"] = rel(lg, manual_logits(cfg, dense, p))
            record(case, [p], [lg])
        alone = [all_logits(model, p) for p in batch]
        batched = batch_logits(model, batch)
        checks["batch vs alone max rel"] = max(rel(b, a) for a, b in zip(alone, batched))
        record("batch", batch, batched if checks["batch vs alone max rel"] < 1e-5 else alone)
        entry["greedy"] = [{"prompt": p, "tokens": greedy(model, p, GREEDY_TOKENS)} for p in singles.values()]
        margins = router_margins(model, singles["len100"], cfg)
        # JSON has no infinity: a model without MoE layers records none.
        for kind in ("expert", "group"):
            checks[f"min router {kind} margin"] = margins[kind] if math.isfinite(margins[kind]) else None

        mtp = Mtp(config, dense, model)
        for case in ("len7", "len40"):
            p = singles[case]
            hidden = last_hidden(model, p)
            target_next = int(all_logits(model, p)[-1].argmax())
            tokens = p[1:] + [target_next]
            logits, outputs = mtp(hidden, torch.tensor(tokens))
            item = {"prompt": p, "next_token": target_next, **row(logits), "chain": []}
            for _ in range(CHAIN_STEPS):
                draft = int(logits[-1].argmax())
                # The chain's step feeds the draft token and the module's own last output (after shared_head.norm).
                hidden = torch.cat([hidden, outputs[-1:]], 0)
                tokens = tokens + [draft]
                logits, outputs = mtp(hidden, torch.tensor(tokens))
                item["chain"].append({"token": draft, **row(logits[-1])})
            entry["mtp"].append(item)
        entry["checks"] = checks
        meta["models"][name] = entry
        print(name, json.dumps(checks, indent=1), flush=True)
        if any(v > 1e-5 for k, v in checks.items() if "manual" in k):
            print("WARNING: transformers' model differs from the plain re-implementation", flush=True)
        if min(margins.values()) < 1e-4:
            print("WARNING: a router choice came within 1e-4 of a tie", flush=True)
    save(args.out, meta, blob)


def save(out, meta, blob):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "deepseek_v3_logits.bin"), "wb") as f:
        f.write(blob)
    with open(os.path.join(out, "deepseek_v3_logits.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print("wrote", os.path.join(out, "deepseek_v3_logits.json"), "and", os.path.join(out, "deepseek_v3_logits.bin"),
          f"({len(blob)} bytes of logits)")


if __name__ == "__main__":
    sys.exit(main())
