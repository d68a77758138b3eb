// What the Node tests share: TAP-style checks, the emulator's vector formula
// (lanepack-emulator --dims 8), and starting lanepack on a free port.
import { createServer } from "node:net";

export const DIMS = 8;
export const tally = { passed: 0, failed: 0 };
export function check(name, cond, detail) {
  if (cond) tally.passed++;
  else tally.failed++;
  console.log(`${cond ? "ok" : "not ok"} - ${name}${cond ? "" : ": " + JSON.stringify(detail).slice(0, 600)}`);
}

// The emulator's vector for a sequence: feature k of its last token's h.
export function expected(ids) {
  let h = 7n;
  for (const t of ids) h = (h * 31n + BigInt(t) + 1n) % 1000000007n;
  const last = Number(h) | 0; // the emulator keeps h as int32 (h < 2^31 here)
  return Array.from({ length: DIMS }, (_, k) => Math.fround((last % 1000) + 0.25 * k));
}
export const same = (a, b) => a.length === b.length && a.every((x, i) => Math.fround(x) === b[i]);

export function freePort() {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); });
  });
}

export async function waitReady(port) {
  for (let i = 0; i < 400; i++) {
    try {
      const r = await fetch(`http://127.0.0.1:${port}/readyz`);
      if (r.status === 200) return;
    } catch { /* not yet */ }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error("lanepack not ready");
}
