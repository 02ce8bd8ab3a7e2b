// Deterministic tokenizer test corpus: one JSON string per line (JSON Lines), so records may
// hold any character, \r\n and tabs included. No network, no randomness beyond a fixed seed.
// Usage: node tools/corpus/gen_corpus.mjs OUT.jsonl [target_bytes=1200000]
//
// Covers: prose in 14 scripts, source code, numbers of every length 1..40 (ASCII, fullwidth,
// Arabic-Indic, Devanagari digits, Roman numerals, superscripts, decimals, grouping),
// white space runs (spaces, tabs, \r\n, \n\n\n, NBSP, em space, ideographic space, \v, \f),
// emoji (single, skin tones, ZWJ families/professions, flags, keycaps), special-token strings
// (real, partial and fake), apostrophe contractions in upper/lower/mixed case, combining marks,
// and 8000 short random strings over a dense alphabet of the tricky characters.
// Deliberately absent: U+0085 and U+FEFF (JavaScript's \s and Unicode White_Space disagree on
// them) and "'ſ" (Oniguruma case-folds ſ to s, the JavaScript port does not): see docs/tokenizer.md.
import { writeFileSync } from 'node:fs';

const out = process.argv[2];
const target = Number(process.argv[3] ?? 1200000);
if (!out) {
  console.error('usage: gen_corpus.mjs OUT.jsonl [target_bytes]');
  process.exit(2);
}

let state = 0x5eed1234;
const rand = () => {  // mulberry32
  state = (state + 0x6d2b79f5) | 0;
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const int = (n) => Math.floor(rand() * n);
const pick = (a) => a[int(a.length)];

const prose = {
  english: [
    "The quick brown fox jumps over the lazy dog, and nobody's surprised anymore.",
    "It was the best of times, it was the worst of times; it was the age of wisdom.",
    "Memory bandwidth, not arithmetic, limits decoding: every weight is read once per step.",
    "She said she'd come at 7:30 p.m., but the train was late (again) — typical!",
    "Why don't we keep the first layers dense and let the deeper ones forget?",
  ],
  french: [
    "Le cœur a ses raisons que la raison ne connaît point.",
    "Où est l'hôtel ? C'est à côté de la gare, près du château d'eau.",
    "Ça n'a pas d'importance : l'été dernier, j'ai lu « Les Misérables ».",
  ],
  german: [
    "Größere Modelle brauchen mehr Speicher, aber Übung macht den Meister.",
    "Die Straße heißt Müllerweg; der Bäcker öffnet um fünf Uhr früh.",
  ],
  spanish: [
    "¿Dónde está la biblioteca? ¡Qué día tan bonito hace hoy, señor Muñoz!",
    "El niño comió piña y jamón en la mañana del miércoles.",
  ],
  russian: [
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Москва — столица России; население превышает двенадцать миллионов человек.",
  ],
  greek: [
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Η γλώσσα μου έδωσαν ελληνική.",
    "Καλημέρα σας! Πώς είστε σήμερα;",
  ],
  arabic: [
    "مرحبا بالعالم، هذه جملة عربية للاختبار.",
    "اللغة العربية جميلة جداً وتُكتب من اليمين إلى اليسار.",
  ],
  hebrew: [
    "שלום עולם! זהו משפט בעברית לבדיקה.",
    "הספר נמצא על השולחן ליד החלון.",
  ],
  hindi: [
    "नमस्ते दुनिया! यह परीक्षण के लिए एक हिंदी वाक्य है।",
    "भारत की राजधानी नई दिल्ली है और यहाँ कई भाषाएँ बोली जाती हैं।",
  ],
  chinese: [
    "我们今天去公园散步，天气非常好。",
    "机器学习模型需要大量的数据和计算资源才能训练。",
    "北京是中华人民共和国的首都，有着悠久的历史。",
  ],
  japanese: [
    "今日はいい天気ですね。カタカナとひらがなと漢字を混ぜて書きます。",
    "東京タワーは一九五八年に完成しました。",
  ],
  korean: [
    "안녕하세요, 세계! 이것은 한국어 테스트 문장입니다.",
    "서울은 대한민국의 수도이며 인구가 많습니다.",
  ],
  thai: [
    "สวัสดีชาวโลก นี่คือประโยคภาษาไทยสำหรับการทดสอบ",
    "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ",
  ],
  other: [
    "Բարեւ աշխարհ, սա հայերեն նախադասություն է։",
    "გამარჯობა მსოფლიო, ეს ქართული წინადადებაა.",
    "বাংলা ভাষা খুব সুন্দর এবং প্রাচীন।",
    "தமிழ் ஒரு பழமையான மொழி ஆகும்.",
    "Tiếng Việt có nhiều dấu thanh: à, á, ả, ã, ạ.",
    "Türkçe: İstanbul'da ılık bir akşam; şarkı söyleyen çocuklar.",
    "Polski: Zażółć gęślą jaźń, źdźbło i łódź.",
  ],
};

const code = [
  "int main(int argc, char** argv) {\n\tfor (int i = 0; i < argc; ++i) printf(\"%s\\n\", argv[i]);\n\treturn 0;\n}",
  "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
  "const xs = [1, 2, 3].map((x) => x ** 2).filter(x => x !== 4); // => [1, 9]",
  "SELECT id, name FROM users WHERE created_at >= '2024-01-01' AND score > 0.75 ORDER BY id DESC;",
  "#include <vector>\ntemplate <typename T>\nstd::vector<T> twice(const std::vector<T>& v) { return {v.begin(), v.end()}; }",
  "fn main() {\r\n    let s: &str = \"héllo\";\r\n    println!(\"{}\", s.len());\r\n}\r\n",
  "<div class=\"card\"><p>Hello&nbsp;world</p><!-- comment --></div>",
  "{\"model\": \"llama-3\", \"temperature\": 0.7, \"stop\": [\"\\n\\n\"], \"max_tokens\": 128}",
  "if [[ -z \"$HOME\" ]]; then echo 'no home' >&2; exit 1; fi  # bash",
  "    return x;;;\n\t\t}\n\n\n  ++i; --j; a->b; c::d; e ?: f; g <=> h; i >>= 2;",
  "$ ls -la /usr/local/bin | grep -E '^-rwx' | wc -l",
  "matrix = [[1.5e-3, -2.0E+10], [0x1F, 0b1010], [0o777, 1_000_000]]",
];

const emoji = [
  "😀", "🙂", "🚀", "🔥", "👍", "👍🏽", "👋🏿", "❤️", "✨", "🎉", "🤖", "🧠",
  "👨‍👩‍👧‍👦", "👩‍💻", "👨🏾‍🔬", "🏳️‍🌈", "🏴‍☠️", "👩‍❤️‍👨", "🧑‍🤝‍🧑", "🐻‍❄️",
  "🇫🇷", "🇯🇵", "🇺🇸", "1️⃣", "#️⃣", "©️", "™", "☕", "⚡",
];

const specials = [
  "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>",
  "<|start_header_id|>user<|end_header_id|>\n\n", "<|start_header_id|>assistant<|end_header_id|>",
  "<|reserved_special_token_0|>", "<|reserved_special_token_42|>", "<|reserved_special_token_250|>",
  "<|finetune_right_pad_id|>", "<|eot_id", "<|eot_id|", "eot_id|>", "<|not_a_token|>", "< |eot_id|>",
  "<|<|eot_id|>|>", "<|end_of_text|><|begin_of_text|>",
];

const contractions = [
  "I'm", "I'M", "you're", "YOU'RE", "You'Re", "we've", "WE'VE", "they'll", "THEY'LL", "it's", "IT'S",
  "It'S", "he'd", "HE'D", "don't", "DON'T", "can't", "CAN'T", "isn't", "o'clock", "rock'n'roll",
  "'s", "'S", "'t", "'T", "'re", "'RE", "'ve", "'VE", "'m", "'M", "'ll", "'LL", "'d", "'D",
  "'tis", "'Twas", "ma'am", "y'all", "Y'ALL", "'sun'", "''", "'''s", "’s", "it’s",
];

const spaces = [
  " ", "  ", "   ", "    ", "        ", "\t", "\t\t", " \t ", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n",
  " \r\n ", "\r", "\n \n", "  \n  ", "\u00a0", "\u2003", "\u3000", "\u000b", "\u000c", " \u00a0 ",
  "\u2009", "\u202f", "\u2028", "\t\n\t",
];

const digitSets = [
  "0123456789", "0123456789", "0123456789", "０１２３４５６７８９", "٠١٢٣٤٥٦٧٨٩", "०१२३४५६७८९",
];
function number() {
  const len = 1 + int(40);
  const set = Array.from(pick(digitSets));
  let s = '';
  for (let i = 0; i < len; ++i) s += set[int(10)];
  switch (int(8)) {
    case 0: return s + '.' + '0123456789'.slice(int(5));
    case 1: return '-' + s;
    case 2: return Number(s.slice(0, 12) || '0').toLocaleString('en-US');
    case 3: return pick(["Ⅻ", "ⅳ", "²", "³", "½", "¾", "①", "⑩", "𝟙𝟚𝟛"]) + s.slice(0, 3);
    case 4: return '$' + s.slice(0, 6) + '.99';
    case 5: return s.slice(0, 4) + '-' + s.slice(0, 2) + '-' + s.slice(0, 2);
    default: return s;
  }
}

const allProse = Object.values(prose).flat();
function word() {
  const sentence = pick(allProse);
  const words = sentence.split(' ');
  return words[int(words.length)];
}

function piece() {
  const r = int(100);
  if (r < 30) return pick(allProse);
  if (r < 38) return pick(code);
  if (r < 48) return number();
  if (r < 56) return pick(spaces);
  if (r < 64) return pick(emoji);
  if (r < 70) return pick(specials);
  if (r < 80) return pick(contractions);
  if (r < 90) return word();
  if (r < 94) return 'e\u0301 a\u0308 n\u0303 \u0915\u094d\u0937 o\u0336';  // combining marks
  return pick([".", ",", "!!!", "?!", "...", "—", "–", "«", "»", "“", "”", "(", ")", "[", "]", "{", "}", "@", "#", "%", "&", "*", "_", "~", "`", "\\", "/", "|", "^", "<", ">", "="]);
}

const lines = [];
let bytes = 0;
// Every number length in every digit set, once.
for (const set of new Set(digitSets)) {
  const ds = Array.from(set);
  for (let len = 1; len <= 40; ++len) {
    let s = '';
    for (let i = 0; i < len; ++i) s += ds[(i * 7 + len) % 10];
    lines.push(`n=${s}; ${s}x ${s}`);
  }
}
// Every prose sentence, alone and with leading/trailing space.
for (const s of allProse) lines.push(s, ' ' + s, s + '\n', '\t' + s + '\r\n');
for (const s of [...specials, ...contractions, ...emoji, ...spaces, ...code]) lines.push(s);
// Long runs: a CJK paragraph with no spaces, a long space run, a long punctuation run.
lines.push(prose.chinese.join('').repeat(40), ' '.repeat(3000) + 'x', '-'.repeat(2000), '\n'.repeat(500) + 'end');
// Dense random strings over the characters where the regex alternatives meet (contraction
// letters after apostrophes, marks after letters, digits of several scripts, every kind of
// white space next to CR/LF, ZWJ, special-token fragments).
const dense = Array.from(
  "aZé ß я中ア한ـ्😀\u200d\u00a0!.,'’sStTrReEvVmMlLdD0123456789٣Ⅻ²\t\n\r\u3000\u2028\u000b\u000c \u0301<|>_-👍🏽🇫🇷#️⃣");
for (let i = 0; i < 8000; ++i) {
  let s = '';
  const n = 1 + int(30);
  for (let k = 0; k < n; ++k) s += pick(dense);
  lines.push(s);
}
for (const l of lines) bytes += Buffer.byteLength(l);
while (bytes < target) {
  const n = 1 + int(int(5) === 0 ? 200 : 25);
  let s = '';
  for (let i = 0; i < n; ++i) {
    s += piece();
    if (int(3) === 0) s += pick([' ', ' ', ' ', '', '\n', '\t']);
  }
  lines.push(s);
  bytes += Buffer.byteLength(s);
}
writeFileSync(out, lines.map((l) => JSON.stringify(l)).join('\n') + '\n');
console.log(`wrote ${out}: ${lines.length} lines, ${bytes} bytes of text`);
