// malformed.mjs — 50 malformed or refused requests: each gets a 4xx with an OpenAI error object
// ({"error": {"message", "type", ...}}), and the server keeps serving afterwards.
import { BASE, KEY, authHeaders, check, health, longText, notOk, post } from './lib.mjs';

const user = [{ role: 'user', content: 'hi' }];
const chat = (extra) => JSON.stringify({ messages: user, ...extra });
const tool = (name) => ({ type: 'function', function: { name, parameters: { type: 'object' } } });
const C = '/v1/chat/completions', P = '/v1/completions';

const cases = [
  // syntax
  [C, ''], [C, '{'], [C, 'not json'], [C, '[]'],
  [C, chat({}) + ' extra'], [C, '{"messages": [{"role": "user", "content": "hi"}],}'],
  // messages
  [C, '{}'], [C, '{"messages": []}'], [C, '{"messages": "hi"}'], [C, '{"messages": [null]}'],
  [C, '{"messages": [{"content": "hi"}]}'], [C, '{"messages": [{"role": "robot", "content": "hi"}]}'],
  [C, '{"messages": [{"role": "user"}]}'], [C, '{"messages": [{"role": "user", "content": 12}]}'],
  [C, '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 100000, "max_tokens": 2}'],
  [C, JSON.stringify({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'http://x/y.png' } }] }] })],
  [C, '{"messages": [{"role": "user", "content": [{"type": "text"}]}]}'],
  [C, '{"messages": [{"role": "tool", "content": "x"}]}'],
  [C, '{"messages": [{"role": "user", "content": "hi", "tool_calls": []}]}'],
  [C, JSON.stringify({ messages: [{ role: 'assistant', content: null, tool_calls: [{ type: 'function',
    function: { name: 'f', arguments: 'not json' } }] }, { role: 'user', content: 'x' }] })],
  // parameters
  [C, chat({ temperature: 'warm' })], [C, chat({ temperature: 5 })], [C, chat({ top_p: -1 })],
  [C, chat({ max_tokens: 0 })], [C, chat({ max_tokens: 'ten' })], [C, chat({ n: 17 })], [C, chat({ stream: 'true' })],
  [C, chat({ stop: 12 })], [C, chat({ stop: Array.from({ length: 17 }, (_, i) => `s${i}`) })],
  [C, chat({ seed: 'abc' })], [C, chat({ presence_penalty: 9 })], [C, chat({ logit_bias: { abc: 1 } })],
  [C, chat({ frequency: 1 })], [C, chat({ logprobs: true, top_logprobs: 25 })], [C, chat({ stream_options: { include_usage: 'yes' } })],
  [C, chat({ max_tokens: 100000 })],
  // tools
  [C, chat({ tools: 'none' })], [C, chat({ tools: [{ type: 'retrieval' }] })], [C, chat({ tools: [tool('get weather')] })],
  [C, chat({ tools: [tool('f')], tool_choice: 'sometimes' })], [C, chat({ tool_choice: 'required' })],
  [C, chat({ response_format: { type: 'yaml' } })],
  // completions
  [P, '{}'], [P, '{"prompt": ""}'], [P, JSON.stringify({ prompt: longText(3000) })],
  // size, routes, methods, auth
  [C, JSON.stringify({ messages: [{ role: 'user', content: 'x'.repeat(1100000) }] })],
  ['GET /v1/nothing'], ['DELETE ' + C], ['POST /v1/models'], ['NOAUTH ' + C],
];

async function send(c) {
  const [what, body] = c;
  if (what.startsWith('NOAUTH ')) return post(what.slice(7), chat({}), { headers: { 'Content-Type': 'application/json' } });
  const sp = what.indexOf(' ');
  if (sp > 0) {
    const res = await fetch(BASE + what.slice(sp + 1), { method: what.slice(0, sp), headers: authHeaders() });
    const text = await res.text();
    let json = null;
    try {
      json = JSON.parse(text);
    } catch {}
    return { status: res.status, text, json };
  }
  return post(what, body);
}

async function main() {
  check(cases.length === 50, 'malformed: 50 cases', `${cases.length} cases`);
  let bad = 0;
  for (let i = 0; i < cases.length; i++) {
    let r;
    try {
      r = await send(cases[i]);
    } catch (e) {
      bad++;
      console.log(`  case ${i} (${cases[i][0]}): request failed: ${e.message}`);
      continue;
    }
    const e = r.json?.error;
    if (!(r.status >= 400 && r.status < 500 && e && typeof e.message === 'string' && typeof e.type === 'string')) {
      bad++;
      console.log(`  case ${i} (${cases[i][0]} ${String(cases[i][1]).slice(0, 60)}): ${r.status} ${r.text.slice(0, 200)}`);
    }
  }
  check(bad === 0, 'malformed: 50 requests answered with 4xx and an error object', `${bad} wrong`);
  const h = await health();
  const r = await post(C, { messages: user, max_tokens: 2, chat_template_kwargs: { enable_thinking: false } });
  check(h.status === 'ok' && r.status === 200, 'malformed: the server keeps serving', `health ${h.status}, chat ${r.status}`);
}

main().catch((e) => notOk('malformed', e.stack || String(e)));
