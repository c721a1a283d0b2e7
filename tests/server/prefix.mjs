// prefix.mjs — prefix reuse gives the tokens of a cold run. `save`: a long first turn, then the second
// turn twice — resumed from the checkpoints (cache_prompt true) and computed from scratch (cache_prompt
// false) — must be identical, greedy and sampled; the result is kept for `restart`, which runs against a
// fresh server on the same --state-dir and must get the same text from checkpoints read from disk.
import { readFileSync, writeFileSync } from 'node:fs';
import { NO_EOG, TMP, check, health, longText, notOk, post } from './lib.mjs';

const mode = process.argv[2] || 'save';
const file = `${TMP}/prefix-expected.json`;
const C = '/v1/chat/completions';

function turn1() {
  return [
    { role: 'system', content: 'You are a careful assistant. ' + longText(60, 7) },
    { role: 'user', content: 'Summarise this: ' + longText(400, 3) },
  ];
}

async function chat(messages, extra) {
  const r = await post(C, { messages, max_tokens: 24, logit_bias: NO_EOG, chat_template_kwargs: { enable_thinking: false },
    ...extra });
  if (r.status !== 200) throw new Error(`status ${r.status}: ${r.text}`);
  const m = r.json.choices[0].message;
  return { text: (m.reasoning_content || '') + '|' + (m.content || ''), cached: r.json.usage.prompt_tokens_details.cached_tokens,
    prompt: r.json.usage.prompt_tokens };
}

async function save() {
  const msgs = turn1();
  const t1 = await chat(msgs, { temperature: 0 });
  const msgs2 = [...msgs, { role: 'assistant', content: t1.text.split('|')[1] }, { role: 'user', content: 'And then? ' + longText(40, 9) }];
  for (const [name, params] of [['greedy', { temperature: 0 }], ['sampled', { temperature: 0.9, top_k: 50, seed: 11 }]]) {
    const warm = await chat(msgs2, { ...params, cache_prompt: true });
    const cold = await chat(msgs2, { ...params, cache_prompt: false });
    check(warm.cached > 0 && cold.cached === 0, `prefix: 2nd turn (${name}) resumes from a checkpoint`,
      `warm cached ${warm.cached} of ${warm.prompt}, cold cached ${cold.cached}`);
    check(warm.text === cold.text, `prefix: 2nd turn (${name}) identical to a cold run`,
      `warm ${JSON.stringify(warm.text)} vs cold ${JSON.stringify(cold.text)}`);
    if (name === 'greedy') console.log(`prefix: turn 2 of ${warm.prompt} tokens resumed from ${warm.cached}`);
    if (name === 'sampled') writeFileSync(file, JSON.stringify({ messages: msgs2, params, text: cold.text }));
  }
  // completions with a token-identical prompt: the whole prompt but the tail is reused
  const prompt = longText(400, 5);
  const a = await post('/v1/completions', { prompt, max_tokens: 16, temperature: 0, logit_bias: NO_EOG });
  const b = await post('/v1/completions', { prompt, max_tokens: 16, temperature: 0, logit_bias: NO_EOG });
  const c = await post('/v1/completions', { prompt, max_tokens: 16, temperature: 0, logit_bias: NO_EOG, cache_prompt: false });
  check(b.json.usage.prompt_tokens_details.cached_tokens > 0 && a.json.choices[0].text === b.json.choices[0].text &&
    b.json.choices[0].text === c.json.choices[0].text, 'prefix: repeated completion prompt reused and identical',
  JSON.stringify([a.json.usage, b.json.usage]));
}

async function restart() {
  const exp = JSON.parse(readFileSync(file, 'utf8'));
  const warm = await chat(exp.messages, { ...exp.params, cache_prompt: true });
  const h = await health();
  check(warm.cached > 0 && h.prefix_cache.hits_disk > 0, 'prefix: after a restart, checkpoints come from --state-dir',
    `cached ${warm.cached}, disk hits ${h.prefix_cache.hits_disk}`);
  check(warm.text === exp.text, 'prefix: restored from disk, identical to the cold run',
    `${JSON.stringify(warm.text)} vs ${JSON.stringify(exp.text)}`);
}

(mode === 'restart' ? restart() : save()).catch((e) => notOk('prefix', e.stack || String(e)));
