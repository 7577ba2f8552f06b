#!/usr/bin/env python3
"""Reference logits for moeserve's CPU runner, from Hugging Face transformers' GptOssForCausalLM.

Run on the GPU host (PyTorch and transformers are there; nothing here needs a GPU: the reference runs in fp32 on
the CPU so that no TF32 or reduced-precision kernel is involved). For each checkpoint directory written by
`moeserve make-tiny ARGS`, it loads the model with Mxfp4Config(dequantize=True) and eager attention, casts it to
fp32 (.float(): the loader leaves some parameters in bf16), checks that it equals a model built by dequantising
the MXFP4 tensors by hand with the exact e2m1 table, and writes logits for several prompts:
  - single prompts of lengths 1, 7, just over the sliding window, and over twice the window;
  - one padded batch of different lengths (left padding, explicit position ids), checked against the same
    prompts run alone;
  - greedy continuations of 32 tokens (no KV cache: the whole sequence is re-run at every step).
Logits are stored whole for a small vocabulary; for the full 201,088-token vocabulary a fixed sample of ids per
position plus each position's argmax.

Usage: gpt_oss_logits.py --out DIR --model NAME=CHECKPOINT_DIR=MAKE_TINY_ARGS ... (MAKE_TINY_ARGS space-separated)
Writes DIR/oracle_logits.json (metadata, prompts, offsets) and DIR/oracle_logits.bin (float32 little-endian).
"""
import argparse
import datetime
import hashlib
import json
import os
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import load_file
from transformers import GptOssConfig, GptOssForCausalLM, Mxfp4Config

FP4_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
SAMPLED_IDS = 1024
GREEDY_TOKENS = 32


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def dequantize(blocks, scales):
    """blocks [E, R, K/32, 16] u8, scales [E, R, K/32] u8 -> [E, R, K] fp32 (low nibble = even element)."""
    lut = torch.tensor(FP4_VALUES, dtype=torch.float32)
    lo = (blocks & 0x0F).long()
    hi = (blocks >> 4).long()
    values = torch.stack([lut[lo], lut[hi]], dim=-1).reshape(*blocks.shape[:-1], 32)
    values = torch.ldexp(values, scales.to(torch.int32).unsqueeze(-1) - 127)
    return values.reshape(blocks.shape[0], blocks.shape[1], -1)


def load_transformers(model_dir):
    model = GptOssForCausalLM.from_pretrained(
        model_dir, quantization_config=Mxfp4Config(dequantize=True), attn_implementation="eager",
        device_map="cpu")
    return model.float().eval()


def load_by_hand(model_dir):
    """The same model built from config.json with every tensor placed by hand (MXFP4 dequantised exactly)."""
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    cfg.pop("quantization_config", None)
    config = GptOssConfig(**cfg)
    config._attn_implementation = "eager"
    model = GptOssForCausalLM(config).float().eval()
    tensors = load_file(os.path.join(model_dir, "model.safetensors"))
    state = {}
    for name, t in tensors.items():
        if name.endswith("_blocks"):
            base = name[: -len("_blocks")]
            w = dequantize(t, tensors[base + "_scales"])
            state[base] = w.transpose(1, 2).contiguous()  # HF's dense layout is [E, in, out]
        elif name.endswith("_scales"):
            continue
        else:
            state[name] = t.float()
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    assert all("rotary" in m for m in missing), missing
    return model


@torch.no_grad()
def all_logits(model, ids):
    out = model(input_ids=torch.tensor([ids]), use_cache=False)
    return out.logits[0].float()


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


def rel(a, b):
    return float((a - b).norm() / b.norm())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", action="append", required=True, help="NAME=DIR=MAKE_TINY_ARGS")
    args = ap.parse_args()
    torch.manual_seed(0)
    blob = bytearray()
    meta = {
        "generator": "tools/oracle/gpt_oss_logits.py",
        "date": datetime.date.today().isoformat(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "models": {},
    }

    def put(t):
        off = len(blob) // 4
        blob.extend(t.detach().cpu().numpy().astype("<f4").tobytes())
        return off

    for spec in args.model:
        name, model_dir, make_args = spec.split("=", 2)
        config = json.load(open(os.path.join(model_dir, "config.json")))
        vocab, window = config["vocab_size"], config["sliding_window"]
        model = load_transformers(model_dir)
        by_hand = load_by_hand(model_dir)
        rng = np.random.default_rng(1234)
        prompt_vocab = min(vocab, 199998)  # ordinary (non-special) ids of o200k_harmony when the vocab is real
        lengths = {"len1": 1, "len7": 7, "over_window": window + 1, "over_twice_window": 2 * window + 6}
        singles = {k: rng.integers(0, prompt_vocab, n).tolist() for k, n in lengths.items()}
        batch = [rng.integers(0, prompt_vocab, n).tolist() for n in (12, window + 13, 3)]
        full = vocab <= 4096
        sample = None if full else np.sort(rng.choice(vocab, SAMPLED_IDS, replace=False)).tolist()
        entry = {"make_tiny_args": make_args.split() if make_args else [],
                 "files": {f: sha256(os.path.join(model_dir, f)) for f in sorted(os.listdir(model_dir))
                           if f.endswith(".safetensors") or f.endswith(".json")},
                 "vocab_size": vocab, "logit_ids": "all" if full else sample, "cases": []}

        def record(case, prompts, logits_list):
            rows = []
            for p, lg in zip(prompts, logits_list):
                sel = lg if full else lg[:, sample]
                rows.append({"prompt": p, "offset": put(sel), "argmax": lg.argmax(-1).tolist(),
                             "argmax_logit": lg.max(-1).values.tolist()})
            entry["cases"].append({"name": case, "sequences": rows})

        checks = {}
        for case, p in singles.items():
            lg = all_logits(model, p)
            checks[f"{case} by-hand max|diff|"] = float((all_logits(by_hand, p) - lg).abs().max())
            record(case, [p], [lg])
        alone = [all_logits(model, p) for p in batch]
        batched = batch_logits(model, batch)
        checks["batch vs alone max rel"] = max(rel(b, a) for a, b in zip(alone, batched))
        record("batch", batch, batched if checks["batch vs alone max rel"] < 1e-5 else alone)
        entry["greedy"] = [{"prompt": p, "tokens": greedy(model, p, GREEDY_TOKENS)} for p in singles.values()]
        entry["checks"] = checks
        meta["models"][name] = entry
        print(name, json.dumps(checks, indent=1), flush=True)
        if any(v != 0.0 for k, v in checks.items() if "by-hand" in k):
            print("WARNING: transformers' MXFP4 load differs from hand dequantisation", flush=True)
        save(args.out, meta, blob)


def save(out, meta, blob):
    with open(os.path.join(out, "oracle_logits.bin"), "wb") as f:
        f.write(blob)
    with open(os.path.join(out, "oracle_logits.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print("wrote", len(blob), "bytes of logits")


if __name__ == "__main__":
    sys.exit(main())
