// lanepack's tokenizer.json tokenizer (src/text/hf*.c, through tests/hf-encode.c)
// against Hugging Face's own tokenizers library (tests/package.json pins the
// npm package, its Rust code): tokenizer.json files built here with the
// library (its trainer on the licences Debian ships, its builders for the
// normalizers, pre-tokenizers and post-processors), then thousands of lines in
// many scripts (accents and combining marks, CJK, Thai, Arabic, Hebrew, emoji
// with joiners and flags, control characters, NBSP and ideographic spaces,
// words over 100 characters, empty, whitespace-only, \r\n), single and as
// pairs, with and without special tokens: ids, type ids and offsets must be
// the library's. A file with an unsupported part is refused naming where.
// Usage: node test-hf-tokenizer.mjs HF_ENCODE [KIND...]
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";

const require = createRequire(import.meta.url);
const T = require("tokenizers");
const [encoder, ...only] = process.argv.slice(2);
const dir = mkdtempSync(join(tmpdir(), "lp-hf-"));
let passed = 0, failed = 0;
function check(name, cond, detail) {
  if (cond) passed++;
  else failed++;
  if (!cond || process.env.LP_VERBOSE) console.log(`${cond ? "ok" : "not ok"} - ${name}${cond ? "" : ": " + JSON.stringify(detail).slice(0, 900)}`);
}

const LIC = "/usr/share/common-licenses";
const files = readdirSync(LIC).map((f) => join(LIC, f)).filter((f) => statSync(f).isFile());

// ---- the texts: the licences' lines, and lines made of fragments in many scripts
const FRAG = [
  "café", "naïve", "Ångström", "e\u0301te\u0301", "A\u030a", "ﬁnance", "Straße", "İstanbul", "ǅemal", "ΣΊΣΥΦΟΣ", "ὈΔΥΣΣΕΎΣ",
  "北京大学", "日本語のテキスト", "カタカナ", "한국어 문장", "𠀀𪚥", "中文，标点。", "ภาษาไทยง่ายนิดเดียว", "العربية لغة", "עִבְרִית",
  "हिन्दी", "Tiếng Việt", "русский язык", "ελληνικά", "👨‍👩‍👧‍👦", "🇫🇷🇩🇪", "👍🏽", "😀!", "1️⃣", "\u0000", "\u0007bell", "\u001b[0m",
  "\u00a0", "\u3000", "\u2003", "\u200b", "\u200d", "\ufeff", "\u00ad", "\ufffd", "\u0085", "\u2028", "tab\there", "a\r\nb", "\r\n", "\n",
  "x".repeat(101), "supercalifragilisticexpialidocious".repeat(4), "", "   ", "don't", "U.S.A.", "$100.00", "x^2+y^2=z^2",
  "e-mail@example.com", "http://example.org/path?q=1", "[SEP]", "[CLS]", "[cls]", "[MASK]", " [SEP] ", "<s>", "</s>", "②③", "Ⅻ", "½",
  "１２３", "ＡＢＣ", "٣٤٥", "१२३", "12345678", "3.14159", "GNU", "General Public License", "LICENSE", "Version 2.0", "(c)", "©",
  "«quote»", "“smart”", "—dash–", "…", "¿Qué?", "¡Hola!", "naïveté", "ÉCOLE", "Ǆ", "ǉ", "\u0130", "ﬀ", "ℌ", "㍿", "̈a", "a\u0308\u0301",
];
let seed = 12345;
function rnd(n) {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return seed % n;
}
const SEPS = [" ", " ", " ", "", "  ", "\t", "\u00a0", "\n", ",", "-"];
function lines(n) {
  const out = [];
  for (const f of files) for (const l of readFileSync(f, "utf8").split("\n")) if (out.length < n / 2) out.push(l);
  while (out.length < n) {
    let s = "";
    const k = 1 + rnd(8);
    for (let i = 0; i < k; i++) s += FRAG[rnd(FRAG.length)] + SEPS[rnd(SEPS.length)];
    out.push(s);
  }
  for (const f of FRAG) out.push(f);
  return out;
}
const TEXTS = lines(Number(process.env.LP_HF_LINES || 2400));

// ---- the tokenizers
function trainedVocab(model, normalizer, pre) {
  const tk = new T.Tokenizer(model);
  if (normalizer) tk.setNormalizer(normalizer);
  if (pre) tk.setPreTokenizer(pre);
  tk.train(files);
  return tk.getVocab();
}
function withSpecials(vocab, specials) {
  const v = { ...vocab };
  let n = Object.keys(v).length;
  for (const s of specials) if (!(s in v)) v[s] = n++;
  return v;
}
const BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];

const KINDS = {
  // bge / e5 / MiniLM: uncased BERT
  "wordpiece-bert-uncased": () => {
    const v = withSpecials(trainedVocab(T.WordPiece.empty(), T.bertNormalizer({ lowercase: true }), T.bertPreTokenizer()), BERT_SPECIALS);
    const tk = new T.Tokenizer(T.WordPiece.init(v, { unkToken: "[UNK]" }));
    tk.setNormalizer(T.bertNormalizer({ lowercase: true }));
    tk.setPreTokenizer(T.bertPreTokenizer());
    tk.setPostProcessor(T.bertProcessing(["[SEP]", v["[SEP]"]], ["[CLS]", v["[CLS]"]]));
    tk.addSpecialTokens(BERT_SPECIALS);
    return tk;
  },
  // cased BERT with a template, accents kept, short words only
  "wordpiece-bert-cased-template": () => {
    const v = withSpecials(trainedVocab(T.WordPiece.empty(), T.bertNormalizer({ lowercase: false }), T.bertPreTokenizer()), BERT_SPECIALS);
    const tk = new T.Tokenizer(T.WordPiece.init(v, { unkToken: "[UNK]", maxInputCharsPerWord: 12 }));
    tk.setNormalizer(T.bertNormalizer({ lowercase: false, stripAccents: false, handleChineseChars: true, cleanText: true }));
    tk.setPreTokenizer(T.bertPreTokenizer());
    tk.setPostProcessor(T.templateProcessing("[CLS] $A [SEP]", "[CLS] $A [SEP] $B:1 [SEP]:1",
      [["[CLS]", v["[CLS]"]], ["[SEP]", v["[SEP]"]]]));
    tk.addSpecialTokens(BERT_SPECIALS);
    return tk;
  },
  // other normalizers and pre-tokenizers around WordPiece, with added tokens of every kind
  "wordpiece-sequences": () => {
    const norm = T.sequenceNormalizer([T.nfkcNormalizer(), T.lowercase(), T.nfdNormalizer(), T.stripAccentsNormalizer(),
      T.nfcNormalizer(), T.stripNormalizer(true, true), T.replace("“", "\"")]);
    const pre = T.sequencePreTokenizer([T.whitespaceSplitPreTokenizer(), T.punctuationPreTokenizer(), T.digitsPreTokenizer(true)]);
    const v = withSpecials(trainedVocab(T.WordPiece.empty(), norm, pre), ["[UNK]", "<s>", "</s>"]);
    const tk = new T.Tokenizer(T.WordPiece.init(v, { unkToken: "[UNK]", continuingSubwordPrefix: "##" }));
    tk.setNormalizer(norm);
    tk.setPreTokenizer(pre);
    tk.setPostProcessor(T.templateProcessing("<s> $A </s>", "<s> $A </s> </s> $B:1 </s>:1", [["<s>", v["<s>"]], ["</s>", v["</s>"]]]));
    tk.addSpecialTokens(["<s>", "</s>"]);
    tk.addAddedTokens([new T.AddedToken("GNU", false, { singleWord: true }), new T.AddedToken("License", false, { leftStrip: true, rightStrip: true }),
      new T.AddedToken("[MASK]", true, { leftStrip: true }), new T.AddedToken("ﬁ", false, { normalized: true })]);
    return tk;
  },
  "wordpiece-whitespace-split": () => {
    const pre = T.sequencePreTokenizer([T.whitespacePreTokenizer(), T.splitPreTokenizer("-", "mergedWithNext", false),
      T.splitPreTokenizer("\\s+", "isolated", true), T.charDelimiterSplit("e"), T.digitsPreTokenizer(false)]);
    const norm = T.sequenceNormalizer([T.nfdNormalizer(), T.prependNormalizer("_"), T.lowercase()]);
    const v = withSpecials(trainedVocab(T.WordPiece.empty(), norm, pre), ["[UNK]"]);
    const tk = new T.Tokenizer(T.WordPiece.init(v, { unkToken: "[UNK]" }));
    tk.setNormalizer(norm);
    tk.setPreTokenizer(pre);
    return tk;
  },
};

// byte offsets (ours) as the library's code point offsets
function cpOffsets(text, offs) {
  const map = new Map();
  let b = 0, c = 0;
  for (const ch of text) {
    map.set(b, c);
    b += Buffer.byteLength(ch);
    c++;
  }
  map.set(b, c);
  return offs.map(([x, y]) => [map.get(x) ?? -1, map.get(y) ?? -1]);
}

async function runKind(name, make) {
  const tk = make();
  const path = join(dir, name + ".json");
  tk.save(path);
  const cases = [];
  for (let i = 0; i < TEXTS.length; i++) {
    cases.push({ a: TEXTS[i], b: null, special: i % 3 !== 2 });
    if (i % 4 === 0) cases.push({ a: TEXTS[i], b: TEXTS[(i * 7 + 3) % TEXTS.length], special: i % 8 === 0 });
  }
  const want = [];
  for (const c of cases) want.push(await tk.encode(c.a, c.b, { addSpecialTokens: c.special }));
  const out = execFileSync(encoder, [path], { input: cases.map((c) => JSON.stringify(c)).join("\n") + "\n", maxBuffer: 1 << 28 })
    .toString().trim().split("\n").map((l) => JSON.parse(l));
  check(`${name}: one answer per case`, out.length === cases.length, { got: out.length, want: cases.length });
  let bad = 0;
  for (let i = 0; i < cases.length && i < out.length; i++) {
    const w = want[i], g = out[i], c = cases[i];
    const wo = w.getOffsets();
    // the pair's offsets are the second text's: split ours by type where the library does
    const seqs = w.getSequenceIds ? w.getSequenceIds() : null;
    const gotOff = g.offsets ? g.offsets.map((o, k) => cpOffsets(seqs && seqs[k] === 1 ? c.b : c.a, [o])[0]) : null;
    const ok = g.ids && JSON.stringify(g.ids) === JSON.stringify(w.getIds()) &&
      JSON.stringify(g.types) === JSON.stringify(w.getTypeIds()) && JSON.stringify(gotOff) === JSON.stringify(wo) &&
      (c.b !== null || JSON.stringify(g.tok) === JSON.stringify(w.getIds()));
    if (!ok && bad++ < 5)
      check(`${name}: case ${i} ${JSON.stringify(c).slice(0, 200)}`, false,
        { want: { ids: w.getIds(), types: w.getTypeIds(), offsets: wo, tokens: w.getTokens() }, got: { ...g, offsets: gotOff } });
  }
  check(`${name}: ${cases.length} cases give the library's ids, type ids and offsets (${bad} differ)`, bad === 0, bad);
}

for (const [name, make] of Object.entries(KINDS)) if (!only.length || only.includes(name)) await runKind(name, make);

// a part lanepack does not run is refused, naming where it sits in the file
{
  const tk = KINDS["wordpiece-bert-uncased"]();
  const path = join(dir, "bad.json");
  tk.save(path);
  const j = JSON.parse(readFileSync(path, "utf8"));
  j.normalizer = { type: "Sequence", normalizers: [{ type: "NFC" }, { type: "Foo" }] };
  writeFileSync(path, JSON.stringify(j));
  let out = "";
  try {
    execFileSync(encoder, [path], { input: "" });
  } catch (e) {
    out = e.stdout.toString();
  }
  check("an unsupported normalizer is refused naming where", out.includes("normalizer.normalizers[1]: type 'Foo' is not supported"), out);
}

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
