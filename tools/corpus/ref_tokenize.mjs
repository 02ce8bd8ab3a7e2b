// Reference ids for a JSON Lines corpus from @lenml/tokenizers (a JavaScript port of HF
// tokenizers) with a tokenizer.json: one line of space-separated ids per record, no BOS.
// Usage: node tools/corpus/ref_tokenize.mjs TOKENIZER_JSON CORPUS.jsonl OUT_IDS
//   (tokenizer_config.json is read from next to TOKENIZER_JSON when present)
import { readFileSync, writeFileSync, existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createRequire } from 'node:module';

const here = dirname(new URL(import.meta.url).pathname);
const require = createRequire(join(here, '../npm/package.json'));
const { TokenizerLoader } = require('@lenml/tokenizers');

const [tokPath, corpusPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error('usage: ref_tokenize.mjs TOKENIZER_JSON CORPUS.jsonl OUT_IDS');
  process.exit(2);
}
const cfgPath = join(dirname(tokPath), 'tokenizer_config.json');
const tokenizerJSON = JSON.parse(readFileSync(tokPath, 'utf8'));
const tokenizerConfig = existsSync(cfgPath) ? JSON.parse(readFileSync(cfgPath, 'utf8')) : {};
tokenizerConfig.tokenizer_class ??= 'PreTrainedTokenizerFast';
const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });

const lines = readFileSync(corpusPath, 'utf8').split('\n').filter((l) => l.length > 0);
const out = [];
for (const l of lines) out.push(tok.encode(JSON.parse(l), { add_special_tokens: false }).join(' '));
writeFileSync(outPath, out.join('\n') + '\n');
console.log(`${outPath}: ${lines.length} lines tokenized with @lenml/tokenizers`);
