// Tokens per CPU-second on one core: lanepack's tokenizer.json tokenizer
// (tests/hf-encode --bench, lp_tok_encode_plain per line) beside Hugging
// Face's own library (the npm package tests/package.json pins, its Rust code
// with RAYON_NUM_THREADS=1, encodeBatch over the same lines), for each kind
// of tokenizer.json the tests build; and decoding those ids back (lp_tok_decode
// beside decodeBatch). Prints one JSON line per kind.
// Usage: RAYON_NUM_THREADS=1 node bench/bench-hf-tokenizer.mjs BUILD/tests/hf-encode [KIND...]
import { execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KINDS, lines } from "../tests/hf-kinds.mjs";

if (process.env.RAYON_NUM_THREADS !== "1") {
  console.error("run with RAYON_NUM_THREADS=1: the library's batches would use every core");
  process.exit(2);
}
const [encoder, ...only] = process.argv.slice(2);
const dir = mkdtempSync(join(tmpdir(), "lp-hfbench-"));
// the test's lines (licences and many scripts) without newlines inside a line
const TEXTS = lines(20000).map((l) => l.replace(/[\r\n\0]/g, " ")).filter((l) => l.length);
const REPS = Number(process.env.LP_BENCH_REPS || 5);
const file = join(dir, "lines.txt");
writeFileSync(file, TEXTS.join("\n") + "\n");

for (const [name, make] of Object.entries(KINDS)) {
  if (only.length && !only.includes(name)) continue;
  const tk = make();
  const path = join(dir, name + ".json");
  tk.save(path);
  await tk.encodeBatch(TEXTS.slice(0, 100), { addSpecialTokens: false }); // warm
  // the library's CPU time is encodeBatch's alone: reading the ids out into
  // JavaScript (counted after) is the binding's cost, not the tokenizer's
  let theirs = 0, theirCpu = 0;
  for (let r = 0; r < REPS; r++) {
    const c0 = process.cpuUsage();
    const out = await tk.encodeBatch(TEXTS, { addSpecialTokens: false });
    const c1 = process.cpuUsage(c0);
    theirCpu += (c1.user + c1.system) / 1e6;
    for (const e of out) theirs += e.getLength();
  }
  // decode: each line's ids back to text (skip_special_tokens), decodeBatch's CPU time alone
  const ids = (await tk.encodeBatch(TEXTS, { addSpecialTokens: false })).map((e) => e.getIds());
  let decCpu = 0;
  for (let r = 0; r < REPS; r++) {
    const c0 = process.cpuUsage();
    await tk.decodeBatch(ids, true);
    const c1 = process.cpuUsage(c0);
    decCpu += (c1.user + c1.system) / 1e6;
  }
  const ours = JSON.parse(execFileSync(encoder, ["--bench", path, file, String(REPS)]).toString());
  const a = ours.tokens / ours.cpu_s, b = theirs / theirCpu;
  const da = ours.tokens / ours.decode_cpu_s, db = theirs / decCpu;
  console.log(JSON.stringify({ kind: name, lines: TEXTS.length * REPS, tokens: ours.tokens, same_count: ours.tokens === theirs,
    lanepack_tok_per_cpu_s: Math.round(a), hf_tok_per_cpu_s: Math.round(b), ratio: +(a / b).toFixed(2),
    lanepack_decode_tok_per_cpu_s: Math.round(da), hf_decode_tok_per_cpu_s: Math.round(db), decode_ratio: +(da / db).toFixed(2) }));
}
