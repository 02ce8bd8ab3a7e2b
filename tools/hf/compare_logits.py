#!/usr/bin/env python3
"""Compare Strata's teacher-forced logits with Hugging Face transformers' LlamaForCausalLM.

usage: compare_logits.py MODEL_DIR IDS_FILE OURS_FILE [--dtypes float32,float64] [--tol 1e-4]
                         [--device cuda|cpu]

MODEL_DIR  a model directory (config.json + safetensors), e.g. from `strata make-model --dtype f32`
IDS_FILE   token ids separated by commas/whitespace (the file given to `strata logits --ids-file`)
OURS_FILE  the .npy written by `strata logits --out` (fp32, shape [n, vocab])

References (each one HF forward pass over all ids, use_cache=False, eager attention):
  float32  the model in fp32 with HF's own RoPE (fp32 angles), TF32 off: the plain HF reference.
  float64  the same weights in fp64 with RoPE angles computed in fp64 (inv_freq recomputed in
           fp64 from HF's rope parameters and checked against HF's own fp32 inv_freq): a
           tighter oracle, free of HF's fp32 rounding at long positions.

Per position t: rel_l2[t] = ||ours[t] - hf[t]||_2 / ||hf[t]||_2 (fp64). Prints one JSON line;
exit status 0 when every reference has max rel_l2 <= tol, 1 when one does not, 2 on errors.
"""

import argparse
import json
import math
import os
import re
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

np = torch = transformers = LlamaForCausalLM = None  # imported in main(): errors become JSON


def import_deps():
    global np, torch, transformers, LlamaForCausalLM
    import numpy as np
    import torch
    import transformers
    from transformers import LlamaForCausalLM


def read_ids(path):
    with open(path) as f:
        text = f.read()
    ids = [int(x) for x in re.findall(r"-?\d+", text)]
    if not ids:
        raise ValueError(f"{path}: no token ids")
    return ids


def strict_fp32():
    """No TF32 anywhere: the fp32 reference must be IEEE fp32."""
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    except AttributeError:
        pass
    try:
        torch.set_float32_matmul_precision("highest")
    except AttributeError:
        pass


def load_model(model_dir, dtype, device):
    kwargs = dict(attn_implementation="eager", local_files_only=True, output_loading_info=True)
    try:
        model, info = LlamaForCausalLM.from_pretrained(model_dir, dtype=dtype, **kwargs)
    except TypeError:  # transformers < 4.56 spells it torch_dtype
        model, info = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=dtype, **kwargs)
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    info = info if isinstance(info, dict) else {}
    missing = [k for k in info.get("missing_keys", []) if not (tied and k.startswith("lm_head"))]
    problems = {
        "missing": sorted(missing),
        "unexpected": sorted(info.get("unexpected_keys", [])),
        "mismatched": [str(x) for x in info.get("mismatched_keys", [])],
    }
    if any(problems.values()):
        raise RuntimeError(f"HF did not load every weight as-is: {problems}")
    return model.to(device).eval()


def rope_parameters(config):
    """(rope_type, theta, params dict) as HF interpreted config.json (5.x or 4.x spelling)."""
    rp = getattr(config, "rope_parameters", None)
    if isinstance(rp, dict) and rp:
        params = dict(rp)
        theta = params.get("rope_theta", getattr(config, "rope_theta", 10000.0))
    else:
        params = dict(getattr(config, "rope_scaling", None) or {})
        theta = getattr(config, "rope_theta", 10000.0)
    rope_type = params.get("rope_type", params.get("type", "default"))
    return rope_type, float(theta), params


def inv_freq_fp64(config):
    """HF's inverse frequencies (default / linear / llama3), in fp64."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    rope_type, theta, p = rope_parameters(config)
    inv = [1.0 / theta ** ((2 * i) / head_dim) for i in range(head_dim // 2)]
    if rope_type == "linear":
        inv = [f / float(p["factor"]) for f in inv]
    elif rope_type == "llama3":
        factor = float(p["factor"])
        low, high = float(p["low_freq_factor"]), float(p["high_freq_factor"])
        old = float(p["original_max_position_embeddings"])
        low_wavelen, high_wavelen = old / low, old / high
        out = []
        for f in inv:
            wavelen = 2 * math.pi / f
            if wavelen < high_wavelen:
                out.append(f)
            elif wavelen > low_wavelen:
                out.append(f / factor)
            else:
                smooth = (old / wavelen - low) / (high - low)
                out.append((1 - smooth) * f / factor + smooth * f)
        inv = out
    elif rope_type != "default":
        raise ValueError(f"rope_type {rope_type!r} is not handled by the fp64 reference")
    return rope_type, inv


def find_rotary(model):
    rot = getattr(getattr(model, "model", None), "rotary_emb", None)
    if rot is None:
        for m in model.modules():
            if type(m).__name__.endswith("RotaryEmbedding"):
                return m
        raise RuntimeError("no rotary embedding module found in the HF model")
    return rot


def patch_rope_fp64(model):
    """Replace HF's fp32 RoPE angles by fp64 ones (same formula; checked against HF's)."""
    rot = find_rotary(model)
    rope_type, inv = inv_freq_fp64(model.config)
    hf_inv = rot.inv_freq.detach().double().cpu().numpy()
    ours = np.array(inv, dtype=np.float64)
    if hf_inv.shape != ours.shape or np.max(np.abs(hf_inv - ours) / ours) > 1e-5:
        raise RuntimeError(
            f"fp64 inv_freq disagrees with HF's ({rope_type}): max rel "
            f"{np.max(np.abs(hf_inv - ours) / ours) if hf_inv.shape == ours.shape else 'shape'}"
        )
    scaling = float(getattr(rot, "attention_scaling", 1.0))

    def forward(x, position_ids=None, *args, **kwargs):
        if position_ids is None:
            position_ids = torch.arange(x.shape[1], device=x.device)[None, :]
        inv_t = torch.tensor(inv, dtype=torch.float64, device=x.device)
        freqs = position_ids.to(torch.float64)[..., None] * inv_t  # [batch, seq, head_dim/2]
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * scaling).to(x.dtype), (emb.sin() * scaling).to(x.dtype)

    rot.forward = forward
    return rope_type


def compare(ours, ref):
    d = ours - ref
    rel = np.sqrt(np.sum(d * d, axis=1) / np.sum(ref * ref, axis=1))
    agree = int(np.sum(np.argmax(ours, axis=1) == np.argmax(ref, axis=1)))
    return {
        "rel_l2_max": float(np.max(rel)),
        "rel_l2_mean": float(np.mean(rel)),
        "worst_position": int(np.argmax(rel)),
        "max_abs": float(np.max(np.abs(d))),
        "argmax_agree": agree,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("ids_file")
    ap.add_argument("ours_file")
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--device", default=None, help="cuda when available, else cpu")
    a = ap.parse_args()
    import_deps()
    if a.device is None:
        a.device = "cuda" if torch.cuda.is_available() else "cpu"
    dtypes = [x.strip() for x in a.dtypes.split(",") if x.strip()]
    for dt in dtypes:
        if dt not in ("float32", "float64"):
            raise ValueError(f"--dtypes: {dt!r} (allowed: float32, float64)")

    ids = read_ids(a.ids_file)
    ours = np.load(a.ours_file).astype(np.float64)
    strict_fp32()
    model = load_model(a.model_dir, torch.float32, a.device)
    vocab = model.config.vocab_size
    if ours.shape != (len(ids), vocab):
        raise ValueError(f"{a.ours_file}: shape {ours.shape}, expected ({len(ids)}, {vocab})")
    if max(ids) >= vocab or min(ids) < 0:
        raise ValueError(f"{a.ids_file}: ids outside [0, {vocab})")
    input_ids = torch.tensor([ids], dtype=torch.long, device=a.device)

    out = {
        "model": a.model_dir,
        "tokens": len(ids),
        "vocab": vocab,
        "device": a.device,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "hf_rope_type": rope_parameters(model.config)[0],
        "tol": a.tol,
        "refs": {},
    }
    for dt in ("float32", "float64"):
        if dt not in dtypes:
            continue
        if dt == "float64":
            patch_rope_fp64(model)
            model = model.to(torch.float64)
        t0 = time.time()
        with torch.no_grad():
            logits = model(input_ids=input_ids, use_cache=False).logits[0]
        ref = logits.double().cpu().numpy()
        r = compare(ours, ref)
        r["hf_seconds"] = round(time.time() - t0, 3)
        out["refs"][dt] = r
    out["pass"] = all(r["rel_l2_max"] <= a.tol for r in out["refs"].values())
    print(json.dumps(out), flush=True)
    return 0 if out["pass"] else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # one JSON line even on failure, for the table
        print(json.dumps({"error": f"{type(e).__name__}: {e}", "model": sys.argv[1:2]}), flush=True)
        sys.exit(2)
