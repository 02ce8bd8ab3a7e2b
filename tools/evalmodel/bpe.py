#!/usr/bin/env python3
"""Byte-level BPE for the evaluation model: pre-tokenizer, trainer, encoder, tokenizer.json.

Pre-tokenizer: the Qwen2 split regex (the Llama-3 regex with `\\p{N}` instead of
`\\p{N}{1,3}`: every digit is its own pre-token, so numbers are copied digit by digit), which
runtime/text/tokenizer.cpp accepts. The corpus is printable ASCII (corpus.py), where the regex is
written exactly with ASCII classes (\\p{L} = [A-Za-z], \\p{N} = [0-9]); on other input this
Python encoder is only an approximation (use `strata tokenize` there).
BPE: standard rank-ordered merges (ignore_merges = false), the GPT-2 byte<->unicode mapping.
Pure Python, no dependencies.
"""
import heapq
import json
import re
from collections import Counter

QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| "
               r"?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_ASCII_REGEX = (QWEN2_REGEX.replace(r"\p{L}", "A-Za-z").replace(r"\p{N}", "0-9")
                .replace("|0-9|", "|[0-9]|").replace("?A-Za-z+", "?[A-Za-z]+"))
PRETOKEN_RE = re.compile(_ASCII_REGEX, re.ASCII)
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"]


def pretokens(text):
    return PRETOKEN_RE.findall(text)


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def train(word_counts, vocab_size):
    """word_counts: {pretoken bytes: count}. Returns (token_bytes list, merges [(a, b)]).
    Token ids 0..255 are the bytes; each merge appends one token. Ties: lowest (a, b) ids."""
    n_merges = vocab_size - 256 - len(SPECIALS)
    tokens = [bytes([b]) for b in range(256)]
    words = [list(w) for w in word_counts]
    counts = list(word_counts.values())
    pair_count = Counter()
    where = {}
    for i, w in enumerate(words):
        c = counts[i]
        for p in zip(w, w[1:]):
            pair_count[p] += c
            where.setdefault(p, set()).add(i)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    merges = []
    while len(merges) < n_merges and heap:
        negc, p = heapq.heappop(heap)
        if pair_count.get(p, 0) != -negc or negc == 0:
            continue
        a, b = p
        new = len(tokens)
        tokens.append(tokens[a] + tokens[b])
        merges.append(p)
        changed = set()
        for i in where.pop(p, ()):
            w = words[i]
            c = counts[i]
            for q in zip(w, w[1:]):
                pair_count[q] -= c
                changed.add(q)
            out = []
            j = 0
            while j < len(w):
                if j + 1 < len(w) and w[j] == a and w[j + 1] == b:
                    out.append(new)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            words[i] = out
            for q in zip(out, out[1:]):
                pair_count[q] += c
                changed.add(q)
                where.setdefault(q, set()).add(i)
        for q in changed:
            c = pair_count.get(q, 0)
            if c > 0:
                heapq.heappush(heap, (-c, q))
            else:
                pair_count.pop(q, None)
    return tokens, merges


class Encoder:
    def __init__(self, tokens, merges):
        self.tokens = tokens
        self.ranks = {p: r for r, p in enumerate(merges)}
        self.merged = {p: 256 + r for r, p in enumerate(merges)}
        self.cache = {}

    def _bpe(self, piece):
        w = list(piece.encode("utf-8"))
        while len(w) > 1:
            best = None
            for p in zip(w, w[1:]):
                r = self.ranks.get(p)
                if r is not None and (best is None or r < best[0]):
                    best = (r, p)
            if best is None:
                break
            a, b = best[1]
            new = self.merged[best[1]]
            out = []
            j = 0
            while j < len(w):
                if j + 1 < len(w) and w[j] == a and w[j + 1] == b:
                    out.append(new)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            w = out
        return w

    def encode(self, text):
        ids = []
        for piece in pretokens(text):
            got = self.cache.get(piece)
            if got is None:
                got = self._bpe(piece)
                if len(self.cache) < 500_000:
                    self.cache[piece] = got
            ids.extend(got)
        return ids

    def decode(self, ids):
        return b"".join(self.tokens[i] for i in ids if i < len(self.tokens)).decode(
            "utf-8", errors="replace")


def write_tokenizer(dir_, tokens, merges):
    b2u = bytes_to_unicode()
    enc = lambda bs: "".join(b2u[x] for x in bs)
    vocab = {enc(t): i for i, t in enumerate(tokens)}
    base = len(tokens)
    added = [{"id": base + i, "content": s, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}
             for i, s in enumerate(SPECIALS)]
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_REGEX}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab,
                  "merges": [enc(tokens[a]) + " " + enc(tokens[b]) for a, b in merges]},
    }
    with open(f"{dir_}/tokenizer.json", "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    cfg = {"bos_token": SPECIALS[0], "eos_token": SPECIALS[1], "pad_token": SPECIALS[2],
           "add_bos_token": False, "model_max_length": 8192,
           "clean_up_tokenization_spaces": False, "tokenizer_class": "PreTrainedTokenizerFast"}
    with open(f"{dir_}/tokenizer_config.json", "w") as f:
        json.dump(cfg, f, indent=1)
    return base + len(SPECIALS)


def load_tokenizer(path):
    """Reads back a tokenizer.json written by write_tokenizer: (tokens, merges, special ids)."""
    with open(path) as f:
        tj = json.load(f)
    u2b = {u: b for b, u in bytes_to_unicode().items()}
    vocab = tj["model"]["vocab"]
    tokens = [None] * len(vocab)
    for s, i in vocab.items():
        tokens[i] = bytes(u2b[ch] for ch in s)
    index = {t: i for i, t in enumerate(tokens)}
    merges = []
    for m in tj["model"]["merges"]:
        a, b = m.split(" ")
        merges.append((index[bytes(u2b[c] for c in a)], index[bytes(u2b[c] for c in b)]))
    specials = {t["content"]: t["id"] for t in tj["added_tokens"]}
    return tokens, merges, specials
