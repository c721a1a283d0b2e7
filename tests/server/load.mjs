// load.mjs — 200 requests at concurrency 8 (streamed and non-streamed chat, completions, and llama-server's
// kinds: POST /completion streamed and not with n_predict / id_slot / include_stop_str_in_output, chat with
// reasoning_format "none" and skip_special_tokens false, keep-alive GETs of /health, /v1/models and /slots):
// every one must succeed. Prints throughput, latency (p50, p95, p99) and, when DELTALLM_SERVER_PID names the
// server, its RSS before and after; `node load.mjs N CONC MAX_TOKENS` for other sizes (bench).
import { readFileSync } from 'node:fs';
import { BASE, NO_EOG, authHeaders, check, modelId, notOk, post, readSSE } from './lib.mjs';

function rssMiB() {
  const pid = process.env.DELTALLM_SERVER_PID;
  if (!pid) return NaN;
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? +m[1] / 1024 : NaN;
  } catch {
    return NaN;
  }
}

const N = +(process.argv[2] || 200), CONC = +(process.argv[3] || 8), MAXT = +(process.argv[4] || 12);

async function llama(i, model) {
  const kind = i % 8;
  if (kind === 4 || kind === 5) {
    const stream = kind === 5;
    const body = { prompt: `Item ${i} of the list is`, n_predict: MAXT, temperature: 0, id_slot: i % 4, stream,
      stop: ['\n\n\n'], include_stop_str_in_output: true, logit_bias: NO_EOG };
    if (!stream) {
      const r = await post('/completion', body);
      if (r.status !== 200) throw new Error(`/completion status ${r.status}: ${r.text}`);
      if (typeof r.json.content !== 'string' || r.json.stop !== true || r.json.id_slot !== i % 4)
        throw new Error(`/completion shape: ${r.text.slice(0, 200)}`);
      return r.json.tokens_predicted;
    }
    const res = await fetch(BASE + '/completion', { method: 'POST', headers: authHeaders(), body: JSON.stringify(body) });
    if (res.status !== 200) throw new Error(`/completion stream status ${res.status}: ${await res.text()}`);
    let tokens = -1;
    await readSSE(res, (ev) => {
      if (ev === '[DONE]') throw new Error('/completion sent [DONE]');
      if (ev.stop === true) tokens = ev.tokens_predicted;
    });
    if (tokens < 0) throw new Error('/completion stream ended without its final event');
    return tokens;
  }
  if (kind === 6) {
    const r = await post('/v1/chat/completions', {
      model, messages: [{ role: 'user', content: `Request ${i}: think aloud.` }], n_predict: MAXT, temperature: 0.7,
      seed: i, reasoning_format: 'none', skip_special_tokens: false, logit_bias: NO_EOG });
    if (r.status !== 200) throw new Error(`reasoning_format none: status ${r.status}: ${r.text}`);
    if ('reasoning_content' in r.json.choices[0].message || typeof r.json.usage.completion_tokens_details?.reasoning_tokens !== 'number')
      throw new Error(`reasoning_format none shape: ${r.text.slice(0, 200)}`);
    return r.json.usage.completion_tokens;
  }
  for (const path of ['/health', '/v1/models', '/slots']) { /* keep-alive GETs on fetch's pooled sockets */
    const res = await fetch(BASE + path, { headers: authHeaders() });
    await res.text();
    if (res.status !== 200) throw new Error(`GET ${path}: ${res.status}`);
  }
  return 0;
}

async function one(i, model) {
  const kind = i % 8;
  if (kind >= 4) {
    const t0 = performance.now();
    const tokens = await llama(i, model);
    return { ms: performance.now() - t0, tokens };
  }
  const t0 = performance.now();
  let tokens = 0;
  if (kind === 0 || kind === 1) {
    const stream = kind === 0;
    const body = {
      model, messages: [{ role: 'user', content: `Request ${i}: tell me something.` }], max_tokens: MAXT,
      temperature: 0.7, seed: i, stream, logit_bias: NO_EOG, chat_template_kwargs: { enable_thinking: i % 8 === 0 },
      ...(stream ? { stream_options: { include_usage: true } } : {}),
    };
    if (stream) {
      const res = await fetch(BASE + '/v1/chat/completions', { method: 'POST', headers: authHeaders(), body: JSON.stringify(body) });
      if (res.status !== 200) throw new Error(`status ${res.status}: ${await res.text()}`);
      let done = false;
      await readSSE(res, (ev) => {
        if (ev === '[DONE]') done = true;
        else if (ev.usage) tokens = ev.usage.completion_tokens;
        else if (ev.error) throw new Error(JSON.stringify(ev.error));
      });
      if (!done) throw new Error('stream ended without [DONE]');
    } else {
      const r = await post('/v1/chat/completions', body);
      if (r.status !== 200) throw new Error(`status ${r.status}: ${r.text}`);
      tokens = r.json.usage.completion_tokens;
    }
  } else if (kind === 2) {
    const r = await post('/v1/completions', { model, prompt: `Item ${i} of the list is`, max_tokens: MAXT, temperature: 0 });
    if (r.status !== 200) throw new Error(`status ${r.status}: ${r.text}`);
    tokens = r.json.usage.completion_tokens;
  } else {
    const body = { model, prompt: `Item ${i} of the list is`, max_tokens: MAXT, temperature: 0, stream: true,
      stream_options: { include_usage: true } };
    const res = await fetch(BASE + '/v1/completions', { method: 'POST', headers: authHeaders(), body: JSON.stringify(body) });
    if (res.status !== 200) throw new Error(`status ${res.status}: ${await res.text()}`);
    let done = false;
    await readSSE(res, (ev) => {
      if (ev === '[DONE]') done = true;
      else if (ev.usage) tokens = ev.usage.completion_tokens;
    });
    if (!done) throw new Error('stream ended without [DONE]');
  }
  return { ms: performance.now() - t0, tokens };
}

async function main() {
  const model = await modelId();
  const rss0 = rssMiB();
  const results = [], errors = [];
  let next = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: CONC }, async () => {
    while (next < N) {
      const i = next++;
      try {
        results.push(await one(i, model));
      } catch (e) {
        errors.push(`#${i}: ${e.message}`);
      }
    }
  }));
  const secs = (performance.now() - t0) / 1000;
  const lat = results.map((r) => r.ms).sort((a, b) => a - b);
  const pct = (p) => (lat.length ? lat[Math.min(lat.length - 1, Math.floor(p * lat.length))].toFixed(0) : 'n/a');
  const tokens = results.reduce((a, r) => a + r.tokens, 0);
  const detail = `${N} requests, concurrency ${CONC}: ${errors.length} failed, ${secs.toFixed(1)} s, ` +
    `${(N / secs).toFixed(2)} req/s, ${(tokens / secs).toFixed(1)} generated tok/s, latency p50 ${pct(0.5)} ms ` +
    `p95 ${pct(0.95)} ms p99 ${pct(0.99)} ms` +
    (Number.isNaN(rss0) ? '' : `, server RSS ${rss0.toFixed(1)} -> ${rssMiB().toFixed(1)} MiB`);
  console.log(`load: ${detail}`);
  if (errors.length) console.log(errors.slice(0, 5).join('\n'));
  check(errors.length === 0 && results.length === N, `load: ${N} requests x ${CONC} concurrent, 0 failures`, detail);
}

main().catch((e) => notOk('load', e.stack || String(e)));
