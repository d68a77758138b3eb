// lanepack's tokenizer.json tokenizer (src/text/hf*.c, through tests/hf-encode.c)
// against Hugging Face's own tokenizers library (tests/package.json pins the
// npm package, its Rust code): tokenizer.json files built here with the
// library (its trainer on the licences Debian ships, its builders for the
// normalizers, pre-tokenizers and post-processors), then thousands of lines in
// many scripts (accents and combining marks, CJK, Thai, Arabic, Hebrew, emoji
// with joiners and flags, control characters, NBSP and ideographic spaces,
// words over 100 characters, empty, whitespace-only, \r\n), single and as
// pairs, with and without special tokens: ids, type ids and offsets must be
// the library's; those ids (and random ones) decode to the library's text. A file with an unsupported part is refused naming where.
// Usage: node test-hf-tokenizer.mjs HF_ENCODE [KIND...]
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KINDS, T, lines } from "./hf-kinds.mjs";
import { check, tally } from "./lpnode.mjs";
const [encoder, ...only] = process.argv.slice(2);
const dir = mkdtempSync(join(tmpdir(), "lp-hf-"));
const TEXTS = lines(Number(process.env.LP_HF_LINES || 2400));

// byte offsets (ours) as the library's code point offsets: a byte maps to
// the character holding it, an end at the text's end to the count (the
// library's BytesToCharOffsetConverter)
function cpOffsets(text, offs) {
  const map = [];
  let c = 0;
  for (const ch of text) {
    for (let k = 0; k < Buffer.byteLength(ch); k++) map.push(c);
    c++;
  }
  const conv = (x, end) => (x < map.length ? map[x] : end && x === map.length ? c : -1);
  return offs.map(([x, y]) => {
    if (x === y) return [conv(x, true), conv(y, true)];
    const s = conv(x, false);
    const e = y < map.length ? map[y] : y === map.length ? (map.length ? map[y - 1] + 1 : 0) : -1;
    return [s, e];
  });
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
      JSON.stringify(g.special) === JSON.stringify(w.getSpecialTokensMask()) &&
      (c.b !== null || JSON.stringify(g.tok) === JSON.stringify(w.getIds())) &&
      (c.b !== null || g.fit === 0); // a cut from plain ids as from the text (lp_tok_fit_ids)
    if (!ok && bad++ < 5)
      check(`${name}: case ${i} ${JSON.stringify(c).slice(0, 200)}`, false,
        { want: { ids: w.getIds(), types: w.getTypeIds(), offsets: wo, special: w.getSpecialTokensMask(), tokens: w.getTokens() },
          got: { ...g, offsets: gotOff } });
  }
  check(`${name}: ${cases.length} cases give the library's ids, type ids, offsets and special tokens (${bad} differ)`, bad === 0, bad);

  // decode: the library's ids of every case (with and without the special
  // tokens skipped), and runs of any ids of the vocabulary (bytes that are no
  // UTF-8, pieces in any order), give the library's decode's text
  const dec = want.map((w, i) => ({ decode: w.getIds(), skip: i % 2 === 0 }));
  const nv = tk.getVocabSize(true);
  for (let i = 0; i < 400; i++) dec.push({ decode: Array.from({ length: 1 + rnd(24) }, () => rnd(nv)), skip: i % 2 === 1 });
  const dwant = [];
  for (const d of dec) dwant.push(await tk.decode(d.decode, d.skip));
  const dout = execFileSync(encoder, [path], { input: dec.map((d) => JSON.stringify(d)).join("\n") + "\n", maxBuffer: 1 << 28 })
    .toString().trim().split("\n").map((l) => JSON.parse(l));
  let dbad = 0;
  for (let i = 0; i < dec.length; i++)
    if (!dout[i] || dout[i].text !== dwant[i]) {
      if (dbad++ < 5)
        check(`${name}: decode ${JSON.stringify(dec[i]).slice(0, 300)}`, false,
          { want: dwant[i], got: dout[i], pieces: dec[i].decode.map((id) => tk.idToToken(id)) });
    }
  check(`${name}: ${dec.length} id lists decode to the library's text (${dbad} differ)`, dbad === 0, dbad);
}
let seed = 777;
function rnd(n) {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return seed % n;
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
  j.normalizer = null;
  j.decoder = { type: "Sequence", decoders: [{ type: "Fuse" }, { type: "Foo" }] };
  writeFileSync(path, JSON.stringify(j));
  out = "";
  try {
    execFileSync(encoder, [path], { input: "" });
  } catch (e) {
    out = e.stdout.toString();
  }
  check("an unsupported decoder is refused naming where", out.includes("decoder.decoders[1]: type 'Foo' is not supported"), out);
}

// every decoder with the options the kinds do not reach (empty suffixes and
// delimiters, Strip's counts, Metaspace's schemes, a Replace regex, bytes that
// are no UTF-8, "<0x+F>"), over pieces made to meet their rules, in any order
{
  const pieces = ["a", "b", "##a", "##", "▁", "▁▁x", "<0x41>", "<0xE2>", "<0x82>", "<0xAC>", "<0x+F>", "<0xzz>", "</w>", "x</w>", "<pad>",
    "|", " .", "n't", " ", "  ", "Ġ", "Ċ", "é", "Ã", "©", "do not", "'s", "x ' y", "<0xF0>", "<0x9F>", "ĠÃ©", "¿", "Â"];
  const vocab = Object.fromEntries(pieces.map((p, i) => [p, i]));
  const added = [{ id: pieces.length, content: "[S]", special: true, single_word: false, lstrip: false, rstrip: false, normalized: false },
    { id: pieces.length + 1, content: "[T]", special: false, single_word: false, lstrip: false, rstrip: false, normalized: false }];
  const BYTELEVEL = { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true };
  const decoders = [null, { type: "BPEDecoder", suffix: "" }, { type: "BPEDecoder", suffix: "</w>" },
    { type: "CTC", pad_token: "<pad>", word_delimiter_token: "", cleanup: true },
    { type: "CTC", pad_token: "<pad>", word_delimiter_token: "|", cleanup: false },
    // (the library's Strip panics on an empty piece or one all of its content: one Strip, first)
    { type: "Sequence", decoders: [{ type: "Strip", content: "▁", start: 3, stop: 0 },
      { type: "Metaspace", replacement: "▁", prepend_scheme: "never", split: false }] },
    { type: "Strip", content: "x", start: 1, stop: 2 },
    { type: "Metaspace", replacement: "▁", prepend_scheme: "first", split: true },
    { type: "Sequence", decoders: [{ type: "Replace", pattern: { Regex: "[▁ ]+" }, content: "_" }, BYTELEVEL] },
    { type: "Sequence", decoders: [{ type: "ByteFallback" }, { type: "Fuse" }, { type: "WordPiece", prefix: "##", cleanup: true }] },
    { type: "WordPiece", prefix: "", cleanup: true }, { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
    { type: "Sequence", decoders: [{ type: "Replace", pattern: { String: "a" }, content: "" }, { type: "ByteFallback" }, { type: "CTC", pad_token: "<pad>", word_delimiter_token: "|", cleanup: true }] }];
  decoders.forEach((decoder, k) => {
    const path = join(dir, `dec${k}.json`);
    writeFileSync(path, JSON.stringify({ version: "1.0", truncation: null, padding: null, added_tokens: added, normalizer: null,
      pre_tokenizer: null, post_processor: null, decoder, model: { type: "WordLevel", vocab, unk_token: "a" } }));
  });
  const lists = [];
  for (let i = 0; i < 600; i++) lists.push({ decode: Array.from({ length: rnd(10) }, () => rnd(pieces.length + 2)), skip: i % 2 === 0 });
  for (let k = 0; k < decoders.length; k++) {
    const path = join(dir, `dec${k}.json`), tk = T.Tokenizer.fromFile(path);
    const want = [];
    for (const d of lists) want.push(await tk.decode(d.decode, d.skip));
    const got = execFileSync(encoder, [path], { input: lists.map((d) => JSON.stringify(d)).join("\n") + "\n" })
      .toString().trim().split("\n").map((l) => JSON.parse(l));
    let bad = 0;
    for (let i = 0; i < lists.length; i++)
      if (!got[i] || got[i].text !== want[i]) {
        if (bad++ < 3)
          check(`decoder ${JSON.stringify(decoders[k])}: ${JSON.stringify(lists[i])}`, false,
            { want: want[i], got: got[i], pieces: lists[i].decode.map((id) => tk.idToToken(id)) });
      }
    check(`decoder ${JSON.stringify(decoders[k]).slice(0, 120)}: ${lists.length} id lists as the library decodes them (${bad} differ)`, bad === 0, bad);
  }
}

console.log(`${tally.passed} passed, ${tally.failed} failed`);
process.exit(tally.failed || !tally.passed ? 1 : 0);
