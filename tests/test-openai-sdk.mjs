// The official OpenAI Node SDK (tests/package.json pins it) against lanepack's
// /v1/embeddings and /v1/models, unchanged (issue 26): models.list(), token
// ids and arrays of them, text through the model's SentencePiece tokenizer
// (trained here with spm_train on a text Debian ships), the SDK's default
// base64 and float, every vector checked against the emulator's formula, and
// the errors the SDK raises (unknown model 404, too long 400, text to a model
// without a tokenizer 400); a model's "embedding" object: unit-length vectors
// and dimensions (the first values, made unit length again) where it allows.
// Usage: node test-openai-sdk.mjs LANEPACK EMULATOR
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { DIMS, check, expected, freePort, same, tally, waitReady } from "./lpnode.mjs";

const [lanepack, emulator] = process.argv.slice(2);
// The first n values scaled to unit length, as float32 (the proxy computes in
// double and rounds once): equal within float32's rounding.
function unit(v, n = v.length) {
  const c = v.slice(0, n);
  const norm = Math.sqrt(c.reduce((s, x) => s + x * x, 0));
  return c.map((x) => x / norm);
}
const near = (a, b) => a.length === b.length && a.every((x, i) => Math.abs(x - b[i]) <= 1e-6);

const tmp = mkdtempSync(join(tmpdir(), "lp-sdk-"));
execFileSync("spm_train", [`--input=/usr/share/common-licenses/GPL-3`, `--model_prefix=${join(tmp, "spm")}`,
  "--vocab_size=400", "--character_coverage=1.0"], { stdio: "ignore" });
const [pe, pl] = [await freePort(), await freePort()];
const emu = spawn(emulator, ["--listen", `127.0.0.1:${pe}`, "--shapes", "4x64", "--per-segment", "--dims", `${DIMS}`],
  { stdio: "ignore" });
const cfg = join(tmp, "lanepack.json");
writeFileSync(cfg, JSON.stringify({
  listen: `127.0.0.1:${pl}`, log_level: "warn",
  models: {
    emb: { shapes: "4x64", max_wait_ms: 1, backends: [`http://127.0.0.1:${pe}`],
           tokenizer: { sentencepiece: join(tmp, "spm.model"), extra_options: "bos:eos" } },
    ids: { shapes: "4x64", max_wait_ms: 1, backends: [`http://127.0.0.1:${pe}`] },
    // vectors of unit length, which may be cut to their first values (Matryoshka)
    cut: { shapes: "4x64", max_wait_ms: 1, backends: [`http://127.0.0.1:${pe}`],
           embedding: { normalize: true, dimensions: DIMS } },
  },
}));
const lp = spawn(lanepack, ["--config", cfg], { stdio: ["ignore", "ignore", "inherit"] });
try {
  await waitReady(pl);
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${pl}/v1`, apiKey: "unused", maxRetries: 0 });

  const models = [];
  for await (const m of client.models.list()) models.push(m.id);
  check("models.list() names the models", models.includes("emb") && models.includes("ids"), models);

  const seqs = [[5, 6, 7], [1, 2], [42]];
  const f = await client.embeddings.create({ model: "ids", input: seqs, encoding_format: "float" });
  check("token-id arrays, float: one vector each, in input order, each the emulator's",
    f.data.length === 3 && f.data.every((d, i) => d.index === i && d.object === "embedding" &&
      same(d.embedding, expected(seqs[i]))) && f.model === "ids" && f.usage.prompt_tokens === 6,
    f);
  const b = await client.embeddings.create({ model: "ids", input: [9, 8, 7] }); // the SDK asks for base64
  check("token ids, the SDK's default base64 decoded by the SDK", b.data.length === 1 &&
    same(b.data[0].embedding, expected([9, 8, 7])), b.data[0]);

  const texts = ["hello world", "Programs are free software.", "日本語 ☃"];
  const t = await client.embeddings.create({ model: "emb", input: texts });
  const ids = execFileSync("spm_encode", [`--model=${join(tmp, "spm.model")}`, "--output_format=id",
    "--extra_options=bos:eos"], { input: texts.join("\n") + "\n" }).toString().trim().split("\n")
    .map((l) => l.split(" ").map(Number));
  check("text through the model's SentencePiece (bos:eos): the vectors of spm_encode's ids",
    t.data.length === 3 && t.data.every((d, i) => same(d.embedding, expected(ids[i]))) &&
      t.usage.prompt_tokens === ids.flat().length, { t: t.data.map((d) => d.embedding.slice(0, 2)), ids });
  const one = await client.embeddings.create({ model: "emb", input: "hello world", encoding_format: "float" });
  check("one string", one.data.length === 1 && same(one.data[0].embedding, expected(ids[0])), one.data);

  async function apiError(req) {
    try {
      await client.embeddings.create(req);
      return null;
    } catch (e) {
      return e;
    }
  }
  let e = await apiError({ model: "nope", input: [1] });
  check("unknown model: the SDK's NotFoundError (404, model_not_found, param model)",
    e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === "model_not_found" && e.param === "model",
    e && { s: e.status, c: e.code, m: e.message });
  e = await apiError({ model: "ids", input: Array.from({ length: 65 }, () => 1) });
  check("too long: BadRequestError (400) naming the limit", e instanceof OpenAI.BadRequestError &&
    /64/.test(e.message) && e.code === "sequence_too_long" && e.param === "input" && !/input_ids|inputs/.test(e.message),
    e && { s: e.status, m: e.message, p: e.param });
  e = await apiError({ model: "ids", input: [[1, 2], Array.from({ length: 65 }, () => 1)] });
  check("too long, the second of two: 400 naming input[1] (OpenAI's field, param input), the limit",
    e instanceof OpenAI.BadRequestError && /(^|\s)input\[1\] /.test(e.message) && /64/.test(e.message) &&
    e.code === "sequence_too_long" && e.param === "input", e && { s: e.status, m: e.message, p: e.param });
  e = await apiError({ model: "ids", input: "a\u0000b" });
  check("a text holding U+0000 (valid JSON): 400 naming \\u0000, not 'not valid JSON'", e instanceof OpenAI.BadRequestError &&
    /\\u0000/.test(e.message) && !/not valid JSON|JSON_ALLOW_NUL/.test(e.message), e && { s: e.status, m: e.message });
  e = await apiError({ model: "ids", input: "text" });
  check("text to a model without a tokenizer: 400 naming the key", e instanceof OpenAI.BadRequestError &&
    /tokenizer/.test(e.message) && e.param === "input", e && { s: e.status, m: e.message });
  e = await apiError({ model: "ids", input: [[1]], dimensions: 4 });
  check("dimensions on a model that may not cut its vectors: 400 naming it", e instanceof OpenAI.BadRequestError &&
    e.param === "dimensions", e && { s: e.status, m: e.message });

  // a model that says its vectors may be cut: dimensions honoured, unit length
  const n = await client.embeddings.create({ model: "cut", input: [[5, 6, 7], [42]], encoding_format: "float" });
  check("embedding.normalize: unit-length vectors, the emulator's scaled",
    n.data.length === 2 && near(n.data[0].embedding, unit(expected([5, 6, 7]))) &&
      near(n.data[1].embedding, unit(expected([42]))), n.data);
  const d = await client.embeddings.create({ model: "cut", input: [[5, 6, 7]], dimensions: 3 });
  check("dimensions 3 on a model that may cut: its first 3 values, made unit length again (base64)",
    d.data.length === 1 && near(d.data[0].embedding, unit(expected([5, 6, 7]), 3)), d.data);
  e = await apiError({ model: "cut", input: [[1]], dimensions: DIMS + 1 });
  check("dimensions over the model's: 400 naming it and the limit", e instanceof OpenAI.BadRequestError &&
    e.param === "dimensions" && new RegExp(`${DIMS}`).test(e.message), e && { s: e.status, m: e.message });
  e = await apiError({ model: "ids", input: Array.from({ length: 1025 }, () => [1]) });
  check("more inputs than max_sequences_per_request (1024): 400 naming it", e instanceof OpenAI.BadRequestError &&
    e.code === "too_many_sequences" && e.param === "input" && /1024/.test(e.message), e && { s: e.status, m: e.message });
} finally {
  lp.kill("SIGTERM");
  emu.kill("SIGTERM");
}
console.log(`${tally.passed} of ${tally.passed + tally.failed} checks passed`);
process.exit(tally.failed || !tally.passed ? 1 : 0);
