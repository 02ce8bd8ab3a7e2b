#!/usr/bin/env python3
"""Natural-text corpus for the evaluation model, from this machine's Debian documentation.

Sources (sorted walk, deterministic for a given set of installed packages):
  /usr/share/common-licenses/*        licence texts
  /usr/share/man/man[1-8]/*.gz         English man pages, roff stripped to plain text
  /usr/share/doc/**                    README / NEWS / *.txt / *.md / changelog (plain or .gz)
Text is reduced to printable ASCII (common Unicode punctuation mapped, the rest dropped) so the
vocabulary stays small and the pure-Python pre-tokenizer in bpe.py is exact.
Writes one JSON string per document (JSON Lines), the format `strata tokenize --jsonl` reads.
Pure Python, no dependencies.
"""
import argparse
import gzip
import json
import os
import re

PUNCT = {
    "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "--",
    "\u2026": "...", "\u00a0": " ", "\u2022": "*", "\u00b7": "*", "\u00e9": "e", "\u00e8": "e",
    "\u00e4": "a", "\u00f6": "o", "\u00fc": "u", "\u00df": "ss", "\u00a9": "(C)",
}

ROFF_ESC = [
    (re.compile(r"\\f(\[[^\]]*\]|\(..|.)"), ""),
    (re.compile(r"\\s[+-]?\d"), ""),
    (re.compile(r"\\[hvwlLDXoZNbR]'[^']*'"), ""),
    (re.compile(r"\\\*(\[[^\]]*\]|\(..|.)"), ""),
    (re.compile(r"\\\((em|en)"), "--"),
    (re.compile(r"\\\((aq|cq)"), "'"),
    (re.compile(r"\\\((lq|rq|dq)"), '"'),
    (re.compile(r"\\\((bu)"), "*"),
    (re.compile(r"\\\(.."), ""),
    (re.compile(r"\\\[[^\]]*\]"), ""),
    (re.compile(r"\\-"), "-"),
    (re.compile(r"\\[e\\]"), r"\\"),
    (re.compile(r"\\[&|^c%:]"), ""),
    (re.compile(r"\\[~0 ]"), " "),
    (re.compile(r"\\\"(.*)$"), ""),
]
TEXT_MACROS = {"SH", "SS", "B", "I", "BR", "RB", "IR", "RI", "BI", "IB", "SM", "SB", "TP", "IP",
               "Nm", "Nd", "Sh", "Ss", "Fl", "Ar", "Pa", "Xr", "Dl", "It", "Em", "Sy"}
PARA_MACROS = {"PP", "P", "LP", "TP", "IP", "SH", "SS", "sp", "br", "Pp", "Sh", "Ss"}


def to_ascii(s):
    out = []
    for ch in s:
        o = ord(ch)
        if ch == "\t":
            out.append("    ")
        elif ch == "\n" or 32 <= o < 127:
            out.append(ch)
        elif ch in PUNCT:
            out.append(PUNCT[ch])
    s = "".join(out)
    s = re.sub(r"[ ]+\n", "\n", s)
    s = re.sub(r"\n{3,}", "\n\n", s)
    return s.strip("\n") + "\n"


def strip_roff(src):
    lines = []
    for raw in src.split("\n"):
        line = raw
        if line.startswith(('.\\"', "'\\\"", '\\"')):
            continue
        if line.startswith((".", "'")):
            parts = line[1:].strip().split(None, 1)
            if not parts:
                continue
            mac = parts[0]
            if mac in PARA_MACROS:
                lines.append("")
            if mac in TEXT_MACROS and len(parts) > 1:
                arg = parts[1]
                arg = arg.replace('"', "") if mac not in ("TP", "IP") else arg.split('"')[1] if arg.count('"') >= 2 else arg
                line = arg
            else:
                continue
        for rx, rep in ROFF_ESC:
            line = rx.sub(rep, line)
        line = line.replace("\\", "")
        lines.append(line)
    return "\n".join(lines)


def read(path):
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            data = f.read(400_000)
        return data.decode("utf-8", errors="replace")
    except (OSError, EOFError, ValueError):
        return ""


def walk(root):
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for f in sorted(files):
            yield os.path.join(d, f)


def doc_wanted(path):
    base = os.path.basename(path).lower()
    stem = base[:-3] if base.endswith(".gz") else base
    if stem.endswith((".txt", ".md", ".rst")):
        return True
    return stem in ("readme", "news", "changelog", "changelog.debian", "copyright", "faq",
                    "todo", "authors", "thanks", "readme.debian", "news.debian", "bugs")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-bytes", type=int, default=12_000_000)
    ap.add_argument("--max-doc", type=int, default=40_000, help="cap per document (bytes)")
    a = ap.parse_args()
    # Share of the byte budget per source.
    budgets = [("licenses", 0.04), ("man", 0.50), ("doc", 0.46)]
    docs = []
    seen = set()
    for name, share in budgets:
        budget = int(a.max_bytes * share)
        if name == "licenses":
            paths = list(walk("/usr/share/common-licenses"))
        elif name == "man":
            paths = [p for sec in "12345678" for p in walk(f"/usr/share/man/man{sec}")]
        else:
            paths = [p for p in walk("/usr/share/doc") if doc_wanted(p)]
        used = 0
        groups = {}
        for p in paths:
            # At most 20 pages per command family (gcloud alone has thousands).
            group = re.split(r"[-_.]", os.path.basename(p), maxsplit=1)[0]
            if name == "man" and groups.get(group, 0) >= 20:
                continue
            if used >= budget:
                break
            real = os.path.realpath(p)
            if real in seen or not os.path.isfile(real):
                continue
            seen.add(real)
            text = read(p)
            if name == "man":
                text = strip_roff(text)
            text = to_ascii(text)[: a.max_doc]
            if len(text) < 200:
                continue
            docs.append(text)
            used += len(text)
            groups[group] = groups.get(group, 0) + 1
        print(f"corpus: {name}: {used} bytes", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        for d in docs:
            f.write(json.dumps(d) + "\n")
    print(f"corpus: {len(docs)} documents, {sum(map(len, docs))} bytes -> {a.out}")


if __name__ == "__main__":
    main()
