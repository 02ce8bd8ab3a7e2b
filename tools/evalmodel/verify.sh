#!/usr/bin/env bash
# Checks the evaluation model's tokenizer and data against Strata's own tokenizer.
#   tools/evalmodel/verify.sh [STRATA_BINARY] [WORK_DIR]      (after prepare.py)
# 1. every corpus document: ids from bpe.Encoder (what natural.u16 holds) == `strata tokenize`,
#    decode(encode(x)) == x, streaming == decode;
# 2. eval-format strings (facts, questions of every template, answers; filler sentences) encoded
#    whole by Strata == the ids synth.py composes from pieces.json;
# 3. the held-out evaluation filler (eval_filler.txt) encoded whole == eval_filler.u16.
set -euo pipefail
cd "$(dirname "$0")/../.."
STRATA=${1:-build/release/strata}
WORK=${2:-build/evalmodel-data}
TOK=tools/evalmodel/tokenizer/tokenizer.json
"$STRATA" tokenize --tokenizer "$TOK" --jsonl "$WORK/corpus.jsonl" --expect "$WORK/corpus.ids"
"$STRATA" tokenize --tokenizer "$TOK" --jsonl "$WORK/templates.jsonl" --expect "$WORK/templates.ids"
"$STRATA" tokenize --tokenizer "$TOK" --jsonl "$WORK/eval_filler.jsonl" --expect "$WORK/eval_filler.ids"
