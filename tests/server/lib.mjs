// lib.mjs — what the server test scripts share: where the server is, raw HTTP helpers, SSE reading, and
// the ok / not ok reporting that run.sh and the C test (tests/test_server.c) read.
export const BASE = process.env.DELTALLM_URL || 'http://127.0.0.1:8080';
export const KEY = process.env.DELTALLM_KEY || '';
export const TMP = process.env.DELTALLM_TEST_TMP || '/tmp';
// The test model's control tokens (<|endoftext|>, <|im_start|>, <|im_end|>): biased away where a test needs
// a generation that does not end early.
export const NO_EOG = { 1000: -100, 1001: -100, 1002: -100 };

let failures = 0;
export function ok(name, detail = '') {
  console.log(`ok ${name}${detail ? ' — ' + detail : ''}`);
}
export function notOk(name, why) {
  failures++;
  process.exitCode = 1;
  console.log(`not ok ${name} — ${why}`);
}
export function check(cond, name, why) {
  if (cond) ok(name);
  else notOk(name, why);
  return cond;
}
export function failed() {
  return failures;
}

export function authHeaders(extra = {}) {
  return { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json', ...extra };
}

export async function post(path, body, { headers, signal } = {}) {
  const res = await fetch(BASE + path, {
    method: 'POST',
    headers: headers || authHeaders(),
    body: typeof body === 'string' ? body : JSON.stringify(body),
    signal,
  });
  const text = await res.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: res.status, headers: res.headers, text, json };
}

export async function health() {
  const res = await fetch(BASE + '/health');
  return res.json();
}

export async function modelId() {
  const res = await fetch(BASE + '/v1/models', { headers: authHeaders() });
  return (await res.json()).data[0].id;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Polls /health until busy slots reach `want` (or the time runs out); returns the last count.
export async function waitBusy(want, ms) {
  const t0 = Date.now();
  let busy = -1;
  while (Date.now() - t0 < ms) {
    busy = (await health()).slots.busy;
    if (busy === want) return busy;
    await sleep(20);
  }
  return busy;
}

// Reads an SSE response body, calling onEvent(parsedJson | '[DONE]') per event.
export async function readSSE(res, onEvent) {
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      for (const line of ev.split('\n')) {
        if (!line.startsWith('data: ')) continue;
        const data = line.slice(6);
        if (onEvent(data === '[DONE]' ? '[DONE]' : JSON.parse(data)) === false) {
          await reader.cancel();
          return;
        }
      }
    }
  }
}

// A user message of roughly n words (deterministic).
export function longText(n, seed = 1) {
  const words = ['alpha', 'river', 'stone', 'cloud', 'green', 'seven', 'north', 'paper', 'light', 'ember', 'quiet',
    'delta', 'orbit', 'maple', 'frost', 'lunar'];
  const out = [];
  let x = seed;
  for (let i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) % 2147483648;
    out.push(words[x % words.length]);
  }
  return out.join(' ');
}
