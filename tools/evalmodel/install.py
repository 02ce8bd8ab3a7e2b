#!/usr/bin/env python3
"""Installs the trained evaluation model from a training run's output folder and checks it.

  python3 tools/evalmodel/install.py RESULTS_DIR [--strata build/release/strata]
                                     [--dest tools/evalmodel/model] [--no-check]

RESULTS_DIR is what train.py wrote to $OUT (model.safetensors, config.json, check.json,
metrics.json, train.log). Places model.safetensors + config.json + the committed tokenizer
(tools/evalmodel/tokenizer/) in --dest, the run's text records (metrics.json, check.json,
train.log) in tools/evalmodel/run/, then, unless --no-check:
  1. `strata tokenize --model DEST` round-trips a sample of the training format;
  2. `strata logits --model DEST --ids-file <check.json ids> --out F.npy` (CPU backend) is
     compared with check.json (HF transformers' fp32 logits of the same fp16 weights):
     argmax agreement per position, max |top-1 logit difference|, and the retrieval answer;
  3. `strata generate --model DEST --ids <the check prompt up to the answer>` greedily (the
     answer it prints is shown next to the expected one).
Pure Python, no dependencies. Exit status 1 when a check fails.
"""
import argparse
import array
import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MAX_BYTES = 20_000_000


def read_npy_f32(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY":
        raise ValueError(f"{path}: not an .npy file")
    major = data[6]
    if major == 1:
        hlen = int.from_bytes(data[8:10], "little")
        start = 10
    else:
        hlen = int.from_bytes(data[8:12], "little")
        start = 12
    header = ast.literal_eval(data[start:start + hlen].decode("latin1"))
    if header["descr"] not in ("<f4", "float32") or header.get("fortran_order"):
        raise ValueError(f"{path}: expected little-endian float32 C order, got {header}")
    arr = array.array("f")
    arr.frombytes(data[start + hlen:])
    if sys.byteorder != "little":
        arr.byteswap()
    return arr, header["shape"]


def run(cmd, **kw):
    print("$ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("--dest", default=os.path.join(HERE, "model"))
    ap.add_argument("--data", default=os.path.join(ROOT, ".gpu-bundle", "evalmodel"),
                    help="prepare.py's bundle folder (eval_filler.txt)")
    ap.add_argument("--records", default=os.path.join(HERE, "run"))
    ap.add_argument("--strata", default=os.path.join(ROOT, "build", "release", "strata"))
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--tol", type=float, default=2e-2,
                    help="max |top-1 logit difference| accepted (fp32 vs fp32, same fp16 weights)")
    a = ap.parse_args()

    src_w = os.path.join(a.results, "model.safetensors")
    src_c = os.path.join(a.results, "config.json")
    for p in (src_w, src_c):
        if not os.path.isfile(p):
            sys.exit(f"install: {p} missing")
    size = os.path.getsize(src_w)
    print(f"install: model.safetensors {size} bytes")
    if size > MAX_BYTES:
        sys.exit(f"install: weights are {size} bytes, over the {MAX_BYTES}-byte limit")
    os.makedirs(a.dest, exist_ok=True)
    shutil.copyfile(src_w, os.path.join(a.dest, "model.safetensors"))
    shutil.copyfile(src_c, os.path.join(a.dest, "config.json"))
    # The held-out documents `strata eval` fills its contexts with (prepare.py, synth.py).
    filler = os.path.join(a.data, "eval_filler.txt")
    if os.path.exists(filler):
        shutil.copyfile(filler, os.path.join(a.dest, "eval_filler.txt"))
    else:
        print(f"install: WARNING: {filler} missing (run prepare.py): strata eval will fill "
              "with word sentences")
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(HERE, "tokenizer", fn), os.path.join(a.dest, fn))
    os.makedirs(a.records, exist_ok=True)
    for fn in ("metrics.json", "check.json", "train.log"):
        if os.path.isfile(os.path.join(a.results, fn)):
            shutil.copyfile(os.path.join(a.results, fn), os.path.join(a.records, fn))
    print(f"install: model in {a.dest}, run records in {a.records}")
    if a.no_check:
        return 0

    ok = True
    strata = a.strata
    if not os.path.isfile(strata):
        sys.exit(f"install: {strata} not built (--strata PATH)")
    sample = "The secret number of Alice is 12345. The river stone.\nQuestion: what is it?"
    r = run([strata, "tokenize", "--model", a.dest, "--text", sample])
    ids = r.stdout.split()
    r2 = run([strata, "tokenize", "--model", a.dest, "--ids", ",".join(ids)])
    back = r2.stdout[:-1] if r2.stdout.endswith("\n") else r2.stdout
    print(f"tokenize: {len(ids)} ids, round trip {'ok' if back == sample else 'DIFFERS'}")
    ok &= back == sample

    check_path = os.path.join(a.results, "check.json")
    if not os.path.isfile(check_path):
        print("install: no check.json (the run ended before writing it): logits not compared")
        return 0 if ok else 1
    check = json.load(open(check_path))
    ids = check["ids"]
    with tempfile.TemporaryDirectory() as tmp:
        idf = os.path.join(tmp, "ids.txt")
        with open(idf, "w") as f:
            f.write(",".join(map(str, ids)))
        npy = os.path.join(tmp, "logits.npy")
        run([strata, "logits", "--model", a.dest, "--ids-file", idf, "--out", npy])
        logits, shape = read_npy_f32(npy)
    n, vocab = shape
    agree = 0
    max_diff = 0.0
    close_calls = 0
    for t in range(n):
        row = logits[t * vocab:(t + 1) * vocab]
        best = max(range(vocab), key=row.__getitem__)
        if best == check["argmax"][t]:
            agree += 1
        elif check["top1"][t] - check["top2"][t] < 1e-2:
            close_calls += 1  # a near tie in the reference: either argmax is fair
        max_diff = max(max_diff, abs(row[check["argmax"][t]] - check["top1"][t]))
    answer = all(max(range(vocab), key=logits[r * vocab:(r + 1) * vocab].__getitem__) ==
                 ids[r + 1] for r in check["answer_rows"])
    print(f"logits vs HF (check.json): argmax equal at {agree}/{n} positions "
          f"({close_calls} differing ones are reference near-ties), max |top-1 logit diff| "
          f"{max_diff:.2e}; retrieval answer: ours {answer}, HF {check['answer_correct']}")
    ok &= agree + close_calls == n and max_diff <= a.tol and answer == check["answer_correct"]

    rows = check["answer_rows"]
    prompt = ids[:rows[0] + 1]
    r = run([strata, "generate", "--model", a.dest, "--ids", ",".join(map(str, prompt)),
             "--max-tokens", str(len(rows)), "--temperature", "0"])
    want = run([strata, "tokenize", "--model", a.dest, "--ids",
                ",".join(map(str, ids[rows[0] + 1:rows[-1] + 2]))]).stdout.rstrip("\n")
    print(f"generate (greedy): {r.stdout.strip()!r}, expected {want!r}")
    print("install: " + ("OK" if ok else "CHECK FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
