// server_bench.mjs — measurements of a running `deltallm serve` (bench/server_bench.sh starts one):
//   1. time to first token of the 2nd turn of a ~4,000-token conversation, with prefix reuse (the turn
//      resumes from the checkpoints the 1st turn left) and without (cache_prompt: false, the whole prompt
//      is computed);
//   2. generation throughput with 1, 2 and 4 clients in parallel (each sends requests back to back).
// Prints a Markdown summary. Needs only Node (fetch; SSE reading from tests/server/lib.mjs, which has no
// dependencies). env: DELTALLM_URL; TARGET_TOKENS (size of the 2nd
// turn's prompt, default 4000); REPS (2nd-turn measurements each way, default 3); GEN_TOKENS (per request
// in the throughput runs, default 64); PER_CLIENT (requests each client sends, default 3); CLIENTS (the parallel
// client counts of the throughput runs, default "1 2 4"); THROUGHPUT_ONLY=1 skips the conversation part (any
// llama-server-compatible server: bench/server_vs_ik.sh points it at ik_llama.cpp's llama-server too); STREAM=1
// sends the throughput requests with stream: true (llama-server answers a non-streamed completion whose text is
// not valid UTF-8, as a random-weight model's often is, with HTTP 500; its event stream replaces the bad bytes).
import { BASE, readSSE } from '../tests/server/lib.mjs';

const TARGET = +(process.env.TARGET_TOKENS || 4000);
const REPS = +(process.env.REPS || 3);
const GEN = +(process.env.GEN_TOKENS || 64);
const PER_CLIENT = +(process.env.PER_CLIENT || 3);
const CLIENTS = (process.env.CLIENTS || '1 2 4').trim().split(/\s+/).map(Number);
const THROUGHPUT_ONLY = process.env.THROUGHPUT_ONLY === '1';
const STREAM = process.env.STREAM === '1';
const headers = { 'Content-Type': 'application/json' };

function words(n, seed) {
  const w = ['alpha', 'river', 'stone', 'cloud', 'green', 'seven', 'north', 'paper', 'light', 'ember', 'quiet', 'delta',
    'orbit', 'maple', 'frost', 'lunar', 'cedar', 'pixel', 'amber', 'tidal'];
  const out = [];
  let x = seed;
  for (let i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) % 2147483648;
    out.push(w[x % w.length]);
  }
  return out.join(' ');
}

async function post(path, body) {
  const r = await fetch(BASE + path, { method: 'POST', headers, body: JSON.stringify(body) });
  const j = await r.json();
  if (r.status !== 200) throw new Error(`${r.status}: ${JSON.stringify(j)}`);
  return j;
}

// Streams a chat completion; returns ms to the first generated text and the usage.
async function ttft(messages, cache) {
  const t0 = performance.now();
  const r = await fetch(BASE + '/v1/chat/completions', {
    method: 'POST', headers,
    body: JSON.stringify({ messages, stream: true, max_tokens: 8, temperature: 0, ignore_eos: true, cache_prompt: cache,
      stream_options: { include_usage: true }, chat_template_kwargs: { enable_thinking: false } }),
  });
  if (r.status !== 200) throw new Error(`${r.status}: ${await r.text()}`);
  let first = null, usage = null;
  await readSSE(r, (ev) => {
    if (ev === '[DONE]') return;
    const d = ev.choices?.[0]?.delta;
    if (first === null && d && (d.content || d.reasoning_content || d.tool_calls)) first = performance.now() - t0;
    if (ev.usage) usage = ev.usage;
  });
  return { ms: first ?? performance.now() - t0, usage };
}

// Streams a completion to its end; returns the last usage and timings the events carried (the generated count
// falls back to timings.predicted_n where a server sends no usage in its stream).
async function streamed(path, body) {
  const r = await fetch(BASE + path, { method: 'POST', headers,
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }) });
  if (r.status !== 200) throw new Error(`${r.status}: ${await r.text()}`);
  let usage = null, timings = null;
  await readSSE(r, (ev) => {
    if (ev === '[DONE]') return;
    if (ev.usage) usage = ev.usage;
    if (ev.timings) timings = ev.timings;
  });
  if (!usage && timings?.predicted_n !== undefined) usage = { completion_tokens: timings.predicted_n };
  if (!usage) throw new Error(`${path}: the stream carried no usage and no timings`);
  return { usage, timings };
}

const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];

async function conversationTTFT() {
  // calibrate words -> tokens (two short probes: slope and template overhead), then build the first turn so
  // that the second turn's prompt has about TARGET tokens
  const probe = async (n) => (await post('/v1/chat/completions', { messages: [{ role: 'user', content: words(n, 1) }],
    max_tokens: 1, cache_prompt: false, chat_template_kwargs: { enable_thinking: false } })).usage.prompt_tokens;
  const p100 = await probe(100), p300 = await probe(300);
  const perWord = (p300 - p100) / 200;
  const turn1 = [
    { role: 'system', content: 'You are a helpful assistant. Answer from the document.' },
    { role: 'user', content: 'Document: ' + words(Math.round((TARGET - 100 - (p100 - 100 * perWord)) / perWord), 2) },
  ];
  const t0 = performance.now();
  const a1 = await post('/v1/chat/completions', { messages: turn1, max_tokens: 32, temperature: 0, ignore_eos: true,
    chat_template_kwargs: { enable_thinking: false } });
  const turn1ms = performance.now() - t0;
  const warm = [], cold = [];
  let usageWarm = null, usageCold = null;
  for (let r = 0; r < REPS; r++) {
    const msgs = [...turn1, { role: 'assistant', content: a1.choices[0].message.content },
      { role: 'user', content: `Question ${r}: what does the document say about ${words(6, 100 + r)}?` }];
    // alternate the order so neither side always runs first
    const order = r % 2 ? [false, true] : [true, false];
    for (const cache of order) {
      const t = await ttft(msgs, cache);
      (cache ? warm : cold).push(t.ms);
      if (cache) usageWarm = t.usage;
      else usageCold = t.usage;
    }
  }
  return { turn1Tokens: a1.usage.prompt_tokens, turn1ms, warm, cold, usageWarm, usageCold };
}

async function throughput(clients, perClient) {
  const t0 = performance.now();
  let tokens = 0;
  const decodeRates = [];
  await Promise.all(Array.from({ length: clients }, async (_, c) => {
    for (let i = 0; i < perClient; i++) {
      const body = { prompt: `Client ${c}, request ${i}: ${words(20, 1000 + c * 97 + i)}`,
        max_tokens: GEN, temperature: 0.8, seed: c * 1000 + i, ignore_eos: true, cache_prompt: false };
      const j = STREAM ? await streamed('/v1/completions', body) : await post('/v1/completions', body);
      tokens += j.usage.completion_tokens;
      decodeRates.push(j.timings?.predicted_per_second ?? NaN);
    }
  }));
  const secs = (performance.now() - t0) / 1000;
  return { clients, requests: clients * perClient, tokens, secs, tps: tokens / secs, perReq: median(decodeRates) };
}

async function main() {
  const health = await (await fetch(BASE + '/health')).json();
  const models = await (await fetch(BASE + '/v1/models')).json();
  console.log(`model ${models.data[0].id}${health.slots ? `, ${health.slots.total} slots` : ''}`);
  if (!THROUGHPUT_ONLY) await conversation();
  console.log(`\n### Throughput (${GEN} generated tokens per request, ignore_eos)\n`);
  console.log('| parallel clients | requests | generated tokens | wall (s) | aggregate tok/s | median per-request tok/s |');
  console.log('|---|---|---|---|---|---|');
  for (const c of CLIENTS) {
    const t = await throughput(c, PER_CLIENT);
    console.log(`| ${t.clients} | ${t.requests} | ${t.tokens} | ${t.secs.toFixed(2)} | ${t.tps.toFixed(1)} | ${t.perReq.toFixed(1)} |`);
  }
}

async function conversation() {
  const conv = await conversationTTFT();
  const mw = median(conv.warm), mc = median(conv.cold);
  console.log('\n### TTFT, 2nd turn of a conversation\n');
  console.log(`first turn: ${conv.turn1Tokens} prompt tokens (computed in ${(conv.turn1ms / 1000).toFixed(2)} s incl. 32 generated)`);
  console.log(`second turn: ${conv.usageWarm.prompt_tokens} prompt tokens; with reuse ${conv.usageWarm.prompt_tokens_details.cached_tokens} of them come from a checkpoint\n`);
  console.log('| 2nd turn | TTFT median (ms) | runs (ms) |');
  console.log('|---|---|---|');
  console.log(`| with prefix reuse | ${mw.toFixed(0)} | ${conv.warm.map((x) => x.toFixed(0)).join(', ')} |`);
  console.log(`| without (cache_prompt: false) | ${mc.toFixed(0)} | ${conv.cold.map((x) => x.toFixed(0)).join(', ')} |`);
  console.log(`\nTTFT ratio without / with reuse: **${(mc / mw).toFixed(1)}x**`);
}

main().catch((e) => {
  console.error(e.stack || String(e));
  process.exit(1);
});
