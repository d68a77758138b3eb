// Models whose tokenizer is a tokenizer.json (issue 32), served: the official
// OpenAI SDK's text on /v1/embeddings gives the vectors of the ids Hugging
// Face's own library (tests/package.json pins it) makes for the text, equal
// to /v1/embeddings of those ids; TEI's /embed likewise; /tokenize gives the
// library's ids with byte offsets into the input and its special pieces;
// /rerank lays a pair out by the configured pair_template, else as the file's
// post-processor does; /decode gives the library's decode (the file's decoder); a file with a part
// lanepack does not run is refused by --check-config naming where it sits.
// One model per kind: BERT's WordPiece, byte-level BPE, Llama-3's Split BPE,
// XLM-R's Unigram; lanepack-loadgen --tokenizer verifies text vectors with the
// file. Usage: node test-hf-routes.mjs LANEPACK EMULATOR [LOADGEN]
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { KINDS, T } from "./hf-kinds.mjs";
import { DIMS, check, expected, freePort, same, tally, waitReady } from "./lpnode.mjs";

const [lanepack, emulator, loadgen] = process.argv.slice(2);
const post = async (port, path, body) => {
  const r = await fetch(`http://127.0.0.1:${port}${path}`, { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
};

const tmp = mkdtempSync(join(tmpdir(), "lp-hfr-"));
const names = { bert: "wordpiece-bert-uncased", roberta: "bpe-bytelevel-roberta", llama: "bpe-llama3-split", xlmr: "unigram-xlmr-precompiled" };
const toks = {};
const [pe, pl] = [await freePort(), await freePort()];
const models = {};
for (const [m, kind] of Object.entries(names)) {
  toks[m] = KINDS[kind]();
  const path = join(tmp, m + ".json");
  toks[m].save(path);
  models[m] = { shapes: "4x256", max_wait_ms: 1, backends: [`http://127.0.0.1:${pe}`], tokenizer: { huggingface: path } };
}
models.bert.tokenizer.pair_template = "[CLS] $A [SEP] $B [SEP]";
models.ids = { shapes: "4x256", max_wait_ms: 1, backends: [`http://127.0.0.1:${pe}`] };
const cfg = join(tmp, "lanepack.json");
writeFileSync(cfg, JSON.stringify({ listen: `127.0.0.1:${pl}`, log_level: "warn", models }));

// a part lanepack does not run: refused at --check-config, naming the key and where in the file
{
  const bad = JSON.parse(readFileSync(models.bert.tokenizer.huggingface, "utf8"));
  bad.normalizer = { type: "Sequence", normalizers: [{ type: "NFC" }, { type: "Foo" }] };
  writeFileSync(join(tmp, "bad.json"), JSON.stringify(bad));
  writeFileSync(join(tmp, "bad-cfg.json"), JSON.stringify({ listen: "127.0.0.1:1", models: {
    M: { shapes: "4x256", backends: ["http://127.0.0.1:2"], tokenizer: { huggingface: join(tmp, "bad.json") } } } }));
  const r = spawnSync(lanepack, ["--config", join(tmp, "bad-cfg.json"), "--check-config"]);
  const out = r.stdout.toString() + r.stderr.toString();
  check("--check-config refuses an unsupported normalizer naming where it sits", r.status !== 0 &&
    out.includes("models.M.tokenizer.huggingface: normalizer.normalizers[1]: type 'Foo' is not supported"), out);
}
// a decoder lanepack does not run: refused likewise (the model never loads, /decode never meets it)
{
  const bad = JSON.parse(readFileSync(models.llama.tokenizer.huggingface, "utf8"));
  bad.decoder = { type: "Sequence", decoders: [{ type: "ByteFallback" }, { type: "Foo" }] };
  writeFileSync(join(tmp, "bad-dec.json"), JSON.stringify(bad));
  writeFileSync(join(tmp, "bad-dec-cfg.json"), JSON.stringify({ listen: "127.0.0.1:1", models: {
    M: { shapes: "4x256", backends: ["http://127.0.0.1:2"], tokenizer: { huggingface: join(tmp, "bad-dec.json") } } } }));
  const r = spawnSync(lanepack, ["--config", join(tmp, "bad-dec-cfg.json"), "--check-config"]);
  const out = r.stdout.toString() + r.stderr.toString();
  check("--check-config refuses an unsupported decoder naming where it sits", r.status !== 0 &&
    out.includes("models.M.tokenizer.huggingface: decoder.decoders[1]: type 'Foo' is not supported"), out);
}

const emu = spawn(emulator, ["--listen", `127.0.0.1:${pe}`, "--shapes", "4x256", "--per-segment", "--dims", `${DIMS}`], { stdio: "ignore" });
const lp = spawn(lanepack, ["--config", cfg], { stdio: ["ignore", "ignore", "inherit"] });
try {
  await waitReady(pl);
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${pl}/v1`, apiKey: "unused", maxRetries: 0 });
  const texts = ["Hello, world!", "  The GNU General Public License  ", "naïve café 北京大学 👨‍👩‍👧 🇫🇷", "İstanbul ＡＢＣ ﬁne don't",
    "مرحبا بالعالم", "tab\there\r\nnext"];
  for (const m of Object.keys(names)) {
    const want = [];
    for (const t of texts) want.push(await toks[m].encode(t));
    const ids = want.map((e) => e.getIds());
    const t = await client.embeddings.create({ model: m, input: texts, encoding_format: "float" });
    check(`${m}: the SDK's text on /v1/embeddings: the vectors of the library's ids`,
      t.data.length === texts.length && t.data.every((d, i) => same(d.embedding, expected(ids[i]))) &&
        t.usage.prompt_tokens === ids.flat().length, { got: t.data.map((d) => d.embedding.slice(0, 2)), ids });
    const viaIds = await client.embeddings.create({ model: m, input: ids, encoding_format: "float" });
    check(`${m}: equal to /v1/embeddings of the library's ids`,
      viaIds.data.every((d, i) => same(d.embedding, t.data[i].embedding)), viaIds.data.map((d) => d.embedding.slice(0, 2)));
    const e = await post(pl, "/embed", { model: m, inputs: texts, normalize: false });
    check(`${m}: /embed of the texts: the vectors of the library's ids`, e.status === 200 &&
      e.body.every((v, i) => same(v, expected(ids[i]))), e);
    const k = await post(pl, "/tokenize", { model: m, inputs: texts[2] });
    const w = want[2];
    const enc = Buffer.from(texts[2]);
    const okTok = k.status === 200 && k.body[0].length === w.getIds().length && k.body[0].every((p, i) => p.id === w.getIds()[i] &&
      (p.special ? p.start === null : p.text === enc.subarray(p.start, p.stop).toString()));
    check(`${m}: /tokenize: the library's ids, each piece's bytes of the input`, okTok, { got: k.body, want: w.getIds() });
    // /decode: the library's decode of those ids (the file's decoder), special pieces skipped (TEI's default) or kept
    const dWant = [], dKeep = [];
    for (const x of ids) dWant.push(await toks[m].decode(x, true));
    for (const x of ids) dKeep.push(await toks[m].decode(x, false));
    const d = await post(pl, "/decode", { model: m, ids });
    check(`${m}: /decode: the library's decode of the ids`, d.status === 200 && JSON.stringify(d.body) === JSON.stringify(dWant),
      { got: d, want: dWant });
    const d2 = await post(pl, "/decode", { model: m, ids, skip_special_tokens: false });
    check(`${m}: /decode skip_special_tokens false: the special pieces kept, as the library's`,
      d2.status === 200 && JSON.stringify(d2.body) === JSON.stringify(dKeep) && dKeep.some((x, i) => x !== dWant[i]), { got: d2, want: dKeep });
  }
  const oor = await post(pl, "/decode", { model: "llama", ids: [1, 2, 1 << 20] });
  check("/decode with an id out of the tokenizer.json's vocabulary: 422 naming it", oor.status === 422 &&
    oor.body.error_type === "Tokenizer" && /not in the model.s vocabulary/.test(oor.body.error), oor);
  // /embed's truncate keeps the post-processor's pieces and cuts the text (Right: its end,
  // Left: its start), as the library's truncation to the model's 256 does
  const long = readFileSync("/usr/share/common-licenses/GPL-3", "utf8").slice(0, 6000);
  for (const m of ["bert", "roberta"]) {
    for (const dir of ["Right", "Left"]) {
      const tk = T.Tokenizer.fromFile(models[m].tokenizer.huggingface);
      tk.setTruncation(256, { direction: dir.toLowerCase() });
      const ids = (await tk.encode(long)).getIds();
      const e = await post(pl, "/embed", { model: m, inputs: long, normalize: false, truncate: true, truncation_direction: dir });
      check(`${m}: /embed truncate ${dir}: the library's truncation to 256`, e.status === 200 && ids.length === 256 &&
        same(e.body[0], expected(ids)), { status: e.status, n: ids.length });
    }
  }
  const q = "what is free software", docs = ["Free software respects freedom.", "北京"];
  const r = await post(pl, "/rerank", { model: "bert", query: q, texts: docs, raw_scores: true });
  const pairIds = [];
  for (const d of docs) pairIds.push((await toks.bert.encode(q, d)).getIds());
  // the emulator's score is the first value of the pair's vector; the template equals the file's pair layout
  check("bert: /rerank with pair_template scores the library's pair ids", r.status === 200 &&
    r.body.every((s) => s.score === expected(pairIds[s.index])[0]), { got: r.body, pairIds });
  // without pair_template: the file's own pair layout (its post-processor's)
  for (const m of ["roberta", "xlmr", "llama"]) {
    const rr = await post(pl, "/rerank", { model: m, query: q, texts: docs, raw_scores: true });
    const ids = [];
    for (const d of docs) ids.push((await toks[m].encode(q, d)).getIds());
    check(`${m}: /rerank without pair_template lays the pair out as the file does`, rr.status === 200 &&
      rr.body.length === 2 && rr.body.every((s) => s.score === expected(ids[s.index])[0]), { got: rr.body, ids });
  }
  // lanepack-loadgen --tokenizer takes the tokenizer.json and checks every text's vector exactly
  if (loadgen) {
    const lines = join(tmp, "lines.txt"), rep = join(tmp, "loadgen.json");
    writeFileSync(lines, texts.map((t) => t.replace(/[\r\n]/g, " ")).join("\n") + "\n");
    const N = 30;
    for (const m of ["bert", "xlmr"]) {
      const g = spawnSync(loadgen, ["--url", `http://127.0.0.1:${pl}`, "--protocol", "openai", "--model", m, "--text", lines,
        "--tokenizer", models[m].tokenizer.huggingface, "--verify", "--dims", `${DIMS}`, "--concurrency", "4",
        "--max-requests", `${N}`, "--duration", "30s", "--timeout", "10s", "--batch", "3", "--json", rep], { timeout: 90000 });
      let j = {};
      try { j = JSON.parse(readFileSync(rep, "utf8")); } catch { /* none */ }
      check(`${m}: lanepack-loadgen --tokenizer tokenizer.json --verify: every vector exact`,
        g.status === 0 && j.ok === N && j.mismatches === 0 && j.failed === 0,
        { rc: g.status, ok: j.ok, mismatches: j.mismatches, err: g.stderr.toString().slice(-300) });
    }
  }
} finally {
  lp.kill("SIGTERM");
  emu.kill("SIGTERM");
}
console.log(`${tally.passed} passed, ${tally.failed} failed`);
process.exit(tally.failed || !tally.passed ? 1 : 0);
