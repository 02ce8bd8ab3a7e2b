#!/usr/bin/env python3
"""Tokenizer parity against Hugging Face's own `tokenizers` library (the canonical
implementation), for the GPU machine (no network: every input is a file argument).

    python3 tools/hf/tokenizer_parity_hf.py TOKENIZER_JSON CORPUS_JSONL STRATA_IDS [--transformers]

CORPUS_JSONL: one JSON string per line (tools/corpus/gen_corpus.mjs); STRATA_IDS: one line of
space-separated ids per record (`strata tokenize --jsonl CORPUS --out STRATA_IDS`; the ctest
parity test leaves both in <build>/tokenizer_parity/llama3/). Checks, for every record, that
HF's ids (no special tokens added) equal Strata's and that HF's decode of them gives the text
back. --transformers also checks transformers' PreTrainedTokenizerFast on the same file.
Exit status 0 only when every line matches; the first difference is printed.
"""
import argparse
import json
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tokenizer_json")
    ap.add_argument("corpus_jsonl")
    ap.add_argument("strata_ids")
    ap.add_argument("--transformers", action="store_true")
    args = ap.parse_args()

    import tokenizers
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(args.tokenizer_json)
    with open(args.corpus_jsonl, encoding="utf-8") as f:
        texts = [json.loads(line) for line in f if line.strip()]
    with open(args.strata_ids, encoding="utf-8") as f:
        ours = [[int(x) for x in line.split()] for line in f.read().split("\n")[: len(texts)]]
    if len(ours) != len(texts):
        print(f"FAIL: {len(texts)} corpus lines but {len(ours)} id lines")
        return 1

    encodings = tok.encode_batch(texts, add_special_tokens=False)
    hf_fast = None
    if args.transformers:
        from transformers import PreTrainedTokenizerFast

        hf_fast = PreTrainedTokenizerFast(tokenizer_file=args.tokenizer_json)
    n_tokens = 0
    n_bytes = 0
    for i, (text, enc, mine) in enumerate(zip(texts, encodings, ours)):
        ref = enc.ids
        if ref != mine:
            k = next((j for j, (a, b) in enumerate(zip(ref, mine)) if a != b), min(len(ref), len(mine)))
            print(f"FAIL: ids differ at line {i + 1}, token {k}")
            print(f"  text: {json.dumps(text, ensure_ascii=False)}")
            print(f"  hf:     {' '.join(map(str, ref))}")
            print(f"  strata: {' '.join(map(str, mine))}")
            return 1
        back = tok.decode(mine, skip_special_tokens=False)
        if back != text:
            print(f"FAIL: HF decode of the ids differs from the text at line {i + 1}")
            print(f"  text: {json.dumps(text, ensure_ascii=False)}")
            print(f"  back: {json.dumps(back, ensure_ascii=False)}")
            return 1
        if hf_fast is not None and hf_fast.encode(text, add_special_tokens=False) != mine:
            print(f"FAIL: transformers PreTrainedTokenizerFast ids differ at line {i + 1}")
            return 1
        n_tokens += len(mine)
        n_bytes += len(text.encode("utf-8"))
    extra = " and transformers" if hf_fast is not None else ""
    print(
        f"OK: {len(texts)} lines, {n_bytes} bytes, {n_tokens} tokens: Strata's ids equal HF tokenizers "
        f"{tokenizers.__version__}{extra}; HF decode gives every line back"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
