#!/usr/bin/env python3
"""Where the evaluation model attends, layer by layer, on held-out retrieval cases.

  /usr/bin/python3 tools/evalmodel/attention.py [--model tools/evalmodel/model]
      [--data .gpu-bundle/evalmodel] [--context 4096] [--cases 8] [--out docs/quality]

A plain fp32 re-implementation of the Llama forward pass (RMSNorm, RoPE at the true positions,
GQA, SwiGLU; the same math as transformers' LlamaForCausalLM, which `install.py` compared with
Strata's logits) over the committed weights, on CPU with PyTorch (Debian's python3-torch works).
Per layer, averaged over cases, the share of attention mass on: sinks (the first 4
positions), the local window (the 32 keys up to the query), the asked fact's name (FIRST
LAST), the asked fact's number (its 5 digits), the other facts, everything else — for the
queries of SnapKV's observation window (the last --window positions before the answer, the
ones the prefill scores with; mean over heads, as SnapKV sums over a group's heads) and for the
queries that predict the answer's digits (the head of the layer that reads the number most).
Writes OUT/attention_by_layer.svg (stacked bars, one panel per query set) and
OUT/attention_by_layer.json. Needs torch, numpy and matplotlib (Debian: python3-torch,
python3-numpy, python3-matplotlib).
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import synth  # noqa: E402
import train  # noqa: E402  (load_natural)


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] in ("F16", "BF16", "F32"), v["dtype"]
        a, b = v["data_offsets"]
        raw = data[a:b]
        if v["dtype"] == "F16":
            t = torch.from_numpy(np.frombuffer(raw, dtype=np.float16).copy()).float()
        elif v["dtype"] == "F32":
            t = torch.from_numpy(np.frombuffer(raw, dtype=np.float32).copy())
        else:
            u = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
            t = torch.from_numpy(u.view(np.float32).copy())
        out[k] = t.reshape(v["shape"])
    return out


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, pos, theta):
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = pos[:, None].double() * inv[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1).float()
    sin = torch.cat([ang.sin(), ang.sin()], -1).float()
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def attention_maps(W, cfg, ids, query_rows):
    """Per layer: [heads, len(query_rows), T] attention probabilities of those queries."""
    H, KV, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps, theta = cfg["rms_norm_eps"], cfg.get("rope_theta", 500000.0)
    T = len(ids)
    pos = torch.arange(T)
    x = W["model.embed_tokens.weight"][torch.tensor(ids)]
    q_idx = torch.tensor(query_rows)
    mask = torch.full((T, T), float("-inf")).triu(1)
    maps = []
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms(x, W[p + "input_layernorm.weight"], eps)
        q = (h @ W[p + "self_attn.q_proj.weight"].T).view(T, H, D).transpose(0, 1)
        k = (h @ W[p + "self_attn.k_proj.weight"].T).view(T, KV, D).transpose(0, 1)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).view(T, KV, D).transpose(0, 1)
        q, k = rope(q, pos, theta), rope(k, pos, theta)
        k = k.repeat_interleave(H // KV, 0)
        v = v.repeat_interleave(H // KV, 0)
        s = q @ k.transpose(-1, -2) / D ** 0.5 + mask
        a = torch.softmax(s, -1)
        maps.append(a[:, q_idx, :].clone())
        o = (a @ v).transpose(0, 1).reshape(T, H * D)
        x = x + o @ W[p + "self_attn.o_proj.weight"].T
        h = rms(x, W[p + "post_attention_layernorm.weight"], eps)
        g = h @ W[p + "mlp.gate_proj.weight"].T
        u = h @ W[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ W[p + "mlp.down_proj.weight"].T
    return maps


def find(seq, sub, start=0):
    for i in range(start, len(seq) - len(sub) + 1):
        if seq[i:i + len(sub)] == sub:
            return i
    return -1


CATS = ["sinks", "local window", "asked name", "asked number", "other facts", "rest"]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(HERE, "model"))
    ap.add_argument("--data", default=os.path.join(ROOT, ".gpu-bundle", "evalmodel"))
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--cases", type=int, default=8)
    ap.add_argument("--window", type=int, default=32)
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "quality"))
    a = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    cfg = json.load(open(os.path.join(a.model, "config.json")))
    W = load_safetensors(os.path.join(a.model, "model.safetensors"))
    meta = json.load(open(os.path.join(a.data, "pieces.json")))
    filler = train.load_natural(a.data, "eval_filler.u16")
    S = synth.Synth(meta["pieces"], None, meta["eos_id"], seed=2024, eval_filler=filler)
    L = cfg["num_hidden_layers"]
    acc = {"window": np.zeros((L, len(CATS))), "answer": np.zeros((L, len(CATS)))}
    for c in range(a.cases):
        ids, rows = S.eval_case(a.context, (c + 0.5) / a.cases, paraphrase=c % 2 == 1)
        # The asked fact: the name the question ends with ("... of FIRST LAST is").
        q_end = rows[0] + 1  # ids[:q_end] ends with " is"
        name = ids[q_end - 3:q_end - 1]
        fact_pre = meta["pieces"][synth.FACT_PRE]
        facts = []
        at = find(ids, fact_pre)
        while 0 <= at < q_end - 40:
            facts.append(at)
            at = find(ids, fact_pre, at + 1)
        asked = [f for f in facts if ids[f + len(fact_pre):f + len(fact_pre) + 2] == name]
        assert len(asked) == 1, (len(asked), len(facts))
        f0 = asked[0] + len(fact_pre)
        name_pos = set(range(f0, f0 + 2))
        num_pos = set(range(f0 + 4, f0 + 9))  # " is", " ", then 5 digits
        other = set()
        for f in facts:
            if f != asked[0]:
                other.update(range(f, f + len(fact_pre) + 11))
        win_rows = list(range(q_end - a.window, q_end))
        # The queries that predict the digits: the answer's " " and its first four digits.
        ans_rows = rows[1:]
        maps = attention_maps(W, cfg, ids, win_rows + ans_rows)
        T = len(ids)
        label = np.full(T, 5)
        label[list(other)] = 4
        label[list(num_pos)] = 3
        label[list(name_pos)] = 2
        label[:4] = 0
        for l, m in enumerate(maps):  # m: [heads, queries, keys]
            for key, qsel in (("window", slice(0, len(win_rows))),
                              ("answer", slice(len(win_rows), None))):
                mq = m[:, qsel, :]
                rows_q = win_rows if key == "window" else ans_rows
                per_head = np.zeros((mq.shape[0], len(CATS)))
                for j, r in enumerate(rows_q):  # local = the 32 keys before each query
                    lab = label.copy()
                    lab[max(4, r - 31):r + 1] = 1
                    w = mq[:, j, :].numpy()
                    for i in range(len(CATS)):
                        per_head[:, i] += w[:, lab == i].sum(-1) / len(rows_q)
                if key == "window":  # SnapKV sums over the query heads: their mean
                    cat = per_head.mean(0)
                else:  # the head that reads the number most
                    cat = per_head[int(per_head[:, 3].argmax())]
                acc[key][l] += cat / a.cases
        print(f"case {c + 1}/{a.cases} done", flush=True)
    os.makedirs(a.out, exist_ok=True)
    res = {k: v.round(4).tolist() for k, v in acc.items()}
    res["categories"] = CATS
    res["context"] = a.context
    res["cases"] = a.cases
    json.dump(res, open(os.path.join(a.out, "attention_by_layer.json"), "w"), indent=1)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    colors = ["#7f7f7f", "#bcbd22", "#1f77b4", "#d62728", "#9467bd", "#dddddd"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    titles = {"window": f"observation window (last {a.window} queries, mean of heads: "
                        "what SnapKV scores)",
              "answer": "queries that predict the 5 digits (the layer's most number-reading "
                        "head)"}
    for ax, key in zip(axes, ("window", "answer")):
        bottom = np.zeros(L)
        for i, name in enumerate(CATS):
            ax.bar(range(L), acc[key][:, i], bottom=bottom, color=colors[i], label=name,
                   width=0.8)
            bottom += acc[key][:, i]
        ax.set_title(titles[key], fontsize=10)
        ax.set_xlabel("layer")
        ax.set_xticks(range(L))
        ax.set_ylim(0, 1)
    axes[0].set_ylabel("share of attention mass (mean over heads, queries, cases)")
    axes[1].legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=9)
    fig.suptitle(f"Evaluation model, held-out retrieval cases at {a.context // 1024}k "
                 f"({a.cases} cases, 4 facts each)", fontsize=11)
    fig.tight_layout()
    fig.savefig(os.path.join(a.out, "attention_by_layer.svg"))
    fig.savefig("/tmp/attention_by_layer.png", dpi=80)
    print(f"wrote {a.out}/attention_by_layer.svg and .json")


if __name__ == "__main__":
    main()
