#!/usr/bin/env python3
"""Builds the evaluation model's tokenizer and training data (pure Python, no dependencies).

  python3 tools/evalmodel/prepare.py [--work build/evalmodel-data] [--bundle .gpu-bundle/evalmodel]

1. corpus.py: Debian documentation -> WORK/corpus.jsonl (skipped when it exists).
2. BPE (bpe.py) on the corpus pre-tokens plus the synthetic vocabulary (synth.py's words,
   names and templates, weighted so they become whole tokens) -> tools/evalmodel/tokenizer/
   {tokenizer.json, tokenizer_config.json} (committed; 2045 BPE tokens + 3 specials = 2048).
3. The corpus encoded by bpe.Encoder -> BUNDLE/natural.u16 (uint16 little-endian, documents
   separated by <|end_of_text|>), and WORK/corpus.ids (one line per document, for
   `strata tokenize --jsonl WORK/corpus.jsonl --expect WORK/corpus.ids`).
4. BUNDLE/pieces.json: ids of every synth.piece_strings() piece, the special ids, the vocab
   size; WORK/templates.jsonl + templates.ids: eval-format strings encoded whole, against the
   ids synth.py composes from pieces (verify.sh checks both with `strata tokenize`).
"""
import argparse
import array
import json
import os
import random
import subprocess
import sys
import time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bpe  # noqa: E402
import synth  # noqa: E402

VOCAB = 2048


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default="build/evalmodel-data")
    ap.add_argument("--bundle", default=".gpu-bundle/evalmodel")
    ap.add_argument("--tokenizer-dir", default=os.path.join(HERE, "tokenizer"))
    ap.add_argument("--max-bytes", type=int, default=12_000_000)
    ap.add_argument("--eval-filler-bytes", type=int, default=400_000,
                    help="held-out documents kept for the evaluation's filler")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.bundle, exist_ok=True)
    os.makedirs(a.tokenizer_dir, exist_ok=True)
    corpus = os.path.join(a.work, "corpus.jsonl")
    if not os.path.exists(corpus):
        subprocess.run([sys.executable, os.path.join(HERE, "corpus.py"), "--out", corpus,
                        "--max-bytes", str(a.max_bytes)], check=True)
    with open(corpus) as f:
        docs = [json.loads(line) for line in f]

    t0 = time.time()
    counts = Counter()
    for d in docs:
        counts.update(bpe.pretokens(d))
    # The synthetic vocabulary: eval words, names and templates become whole tokens.
    boost = Counter()
    for s in synth.piece_strings():
        for p in bpe.pretokens(s):
            boost[p] += 20000
    for w in synth.WORDS[:24] + synth.FIRST_NAMES + synth.LAST_NAMES:
        boost[" " + w] += 100000
    for s in ["Question", "Answer", " secret", " number"]:
        boost[s] += 100000
    counts.update(boost)
    word_counts = {}
    for p, c in counts.items():
        b = p.encode("utf-8")
        word_counts[b] = word_counts.get(b, 0) + c
    print(f"prepare: {len(docs)} documents, {len(word_counts)} distinct pre-tokens "
          f"({time.time() - t0:.1f} s)", flush=True)
    t0 = time.time()
    tokens, merges = bpe.train(word_counts, VOCAB)
    n = bpe.write_tokenizer(a.tokenizer_dir, tokens, merges)
    assert n == VOCAB, n
    print(f"prepare: BPE {len(merges)} merges, vocab {n} ({time.time() - t0:.1f} s) -> "
          f"{a.tokenizer_dir}", flush=True)

    # Re-read what was written, so the data is encoded by the file's own contents.
    tokens, merges, specials = bpe.load_tokenizer(os.path.join(a.tokenizer_dir, "tokenizer.json"))
    enc = bpe.Encoder(tokens, merges)
    eos = specials["<|end_of_text|>"]
    t0 = time.time()
    # Held-out documents: the evaluation's filler, never in training (synth.py's docstring).
    heldout, train_docs, held_bytes = [], [], 0
    for d in docs:
        if synth.fnv1a64(d) % 20 == 0 and held_bytes < a.eval_filler_bytes and len(d) > 2000:
            heldout.append(d)
            held_bytes += len(d)
        else:
            train_docs.append(d)
    filler_text = "\n\n".join(heldout)
    filler_ids = enc.encode(filler_text)
    with open(os.path.join(a.bundle, "eval_filler.txt"), "w") as f:
        f.write(filler_text)
    fa = array.array("H", filler_ids)
    if sys.byteorder != "little":
        fa.byteswap()
    with open(os.path.join(a.bundle, "eval_filler.u16"), "wb") as f:
        fa.tofile(f)
    with open(os.path.join(a.work, "eval_filler.jsonl"), "w") as f:
        f.write(json.dumps(filler_text) + "\n")
    with open(os.path.join(a.work, "eval_filler.ids"), "w") as f:
        f.write(" ".join(map(str, filler_ids)) + "\n")
    print(f"prepare: {len(heldout)} held-out documents ({held_bytes} bytes, {len(filler_ids)} "
          f"tokens) -> {a.bundle}/eval_filler.txt, .u16", flush=True)
    held = set(id(d) for d in heldout)
    stream = array.array("H")
    n_bytes = 0
    with open(os.path.join(a.work, "corpus.ids"), "w") as f:
        for d in docs:  # every document (verify.sh), the held-out ones out of natural.u16
            ids = enc.encode(d)
            f.write(" ".join(map(str, ids)) + "\n")
            if id(d) in held:
                continue
            stream.extend(ids)
            stream.append(eos)
            n_bytes += len(d)
    if sys.byteorder != "little":
        stream.byteswap()
    with open(os.path.join(a.bundle, "natural.u16"), "wb") as f:
        stream.tofile(f)
    print(f"prepare: natural text {n_bytes} bytes -> {len(stream)} tokens "
          f"({n_bytes / len(stream):.2f} bytes/token, {time.time() - t0:.1f} s) -> "
          f"{a.bundle}/natural.u16 ({os.path.getsize(os.path.join(a.bundle, 'natural.u16'))} B)",
          flush=True)

    pieces = {s: enc.encode(s) for s in synth.piece_strings()}
    meta = {"vocab_size": VOCAB, "bos_id": specials["<|begin_of_text|>"], "eos_id": eos,
            "pad_id": specials["<|pad|>"], "pieces": pieces}
    with open(os.path.join(a.bundle, "pieces.json"), "w") as f:
        json.dump(meta, f)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        with open(os.path.join(a.tokenizer_dir, fn), "rb") as src, \
                open(os.path.join(a.bundle, fn), "wb") as dst:
            dst.write(src.read())

    # Template parity material: eval strings encoded whole vs the synth composition.
    S = synth.Synth(pieces, seed=1)
    rng = random.Random(7)
    with open(os.path.join(a.work, "templates.jsonl"), "w") as fj, \
            open(os.path.join(a.work, "templates.ids"), "w") as fi:
        def emit(text, ids):
            fj.write(json.dumps(text) + "\n")
            fi.write(" ".join(map(str, ids)) + "\n")
        templates = synth.QUESTIONS + [synth.EVAL_PARAPHRASE]
        for i in range(400):
            f, l = S.pick_names(1, S.heldout_names if i % 2 else S.train_names)[0]
            digits = S.number()
            number = "".join(map(str, digits))
            t = i % len(templates)
            fact, question, answer = synth.eval_strings(synth.FIRST_NAMES[f], synth.LAST_NAMES[l],
                                                        number, templates[t])
            tq = S.paraphrase if t == len(templates) - 1 else S.questions[t]
            emit(fact, S.fact((f, l), digits))
            emit(question, S.question((f, l), tq))
            emit(answer, S.answer(digits))
            emit(fact + question + answer,
                 S.fact((f, l), digits) + S.question((f, l), tq) + S.answer(digits))
        for _ in range(300):
            words = rng.sample(synth.WORDS, 5)
            n = rng.randint(6, 12)
            ws = [rng.choice(words) for _ in range(n)]
            text = "The " + " ".join(ws) + ". "
            ids = pieces["The"] + sum((pieces[" " + w] for w in ws), []) + pieces["."] + pieces[" "]
            emit(text, ids)
    print(f"prepare: pieces.json ({len(pieces)} pieces), templates for verify.sh", flush=True)


if __name__ == "__main__":
    main()
