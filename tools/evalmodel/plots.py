#!/usr/bin/env python3
"""docs/quality.md's retrieval-vs-compression picture from `strata eval` results.

  /usr/bin/python3 tools/evalmodel/plots.py OUT.svg EVAL.json [EVAL.json ...] [--full-layers 1]

One panel per retrieval mode (question in the observation window; follow-up question),
exact match against overall KV compression (the cache's own accounting), one line per policy
and context, for one full-layer count (the retrieval rows of 0, 1 and 2 full layers coincide
within a point on the evaluation model: docs/quality.md), with the full cache as the point at
1x and each point's 95 % interval (Wilson) as an error bar. Needs matplotlib.
"""
import argparse
import json
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def wilson(p, n):
    z = 1.959964
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return c - h, c + h


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("evals", nargs="+")
    ap.add_argument("--full-layers", type=int, default=1)
    a = ap.parse_args()
    rows = []
    for path in a.evals:
        rows += json.load(open(path))["rows"]
    ctxs = sorted({r["context"] for r in rows})
    colors = {"window": "#7f7f7f", "snapkv": "#1f77b4", "scored": "#d62728"}
    styles = {c: s for c, s in zip(ctxs, ["-", "--", ":", "-."])}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4), sharey=True)
    for ax, mode, title in ((axes[0], "retrieval_window", "question in the observation window"),
                            (axes[1], "retrieval_followup", "follow-up question (decoded)")):
        for pol in ("window", "snapkv", "scored"):
            for c in ctxs:
                full = [r for r in rows if r["policy"] == "full" and r["context"] == c]
                pts = sorted((r["overall_compression"], r[mode], r["retrieval_cases"])
                             for r in rows if r["policy"] == pol and r["context"] == c and
                             r["full_layers"] == a.full_layers)
                if full:
                    pts = [(1.0, full[0][mode], full[0]["retrieval_cases"])] + pts
                if not pts:
                    continue
                xs = [p[0] for p in pts]
                ys = [100 * p[1] for p in pts]
                lo = [100 * (p[1] - wilson(p[1], p[2])[0]) for p in pts]
                hi = [100 * (wilson(p[1], p[2])[1] - p[1]) for p in pts]
                ax.errorbar(xs, ys, yerr=[lo, hi], color=colors[pol], linestyle=styles[c],
                            marker="o", markersize=3.5, capsize=2,
                            label=f"{pol}, {c // 1024}k")
        ax.set_xscale("log")
        ax.set_xticks([1, 2, 4, 8, 16])
        ax.set_xticklabels(["1x", "2x", "4x", "8x", "16x"])
        ax.set_xlabel(f"overall KV compression ({a.full_layers} full layer"
                      f"{'s' if a.full_layers != 1 else ''}, the rest sparse)")
        ax.set_title(title, fontsize=10)
        ax.set_ylim(0, 102)
        ax.grid(True, color="#eee")
    axes[0].set_ylabel("exact match, % (95 % interval)")
    axes[1].legend(fontsize=8, loc="upper right")
    n = min(r["retrieval_cases"] for r in rows)
    fig.suptitle(f"Evaluation model: retrieval vs KV compression ({n} held-out facts per point)",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(a.out)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
