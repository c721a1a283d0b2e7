// anthropic.mjs — the official `@anthropic-ai/sdk` client against `deltallm serve`'s /v1/messages (the Messages
// API as llama-server serves it): a message, a streamed message (the SDK's event accumulation and finalMessage),
// a forced tool call with its input, the tool_result turn back, and a refused request.
import Anthropic from '@anthropic-ai/sdk';
import { BASE, KEY, check } from './lib.mjs';

// the SDK's own way: the key in x-api-key
const client = new Anthropic({ baseURL: BASE, apiKey: KEY, maxRetries: 0, timeout: 120000 });
// and a wrong key is refused
const wrong = new Anthropic({ baseURL: BASE, apiKey: 'not-the-key', maxRetries: 0, timeout: 120000 });
const weather = {
  name: 'get_weather',
  description: 'Current weather for a city',
  input_schema: {
    type: 'object',
    properties: { city: { type: 'string', enum: ['Paris', 'Tokyo', 'Lima'] } },
    required: ['city'],
  },
};

// the limit reached (max_tokens, exactly n tokens) or the model's own end (end_turn, at most n)
function ended(m, n) {
  return m.stop_reason === 'max_tokens' ? m.usage.output_tokens === n
    : m.stop_reason === 'end_turn' && m.usage.output_tokens >= 1 && m.usage.output_tokens <= n;
}

async function main() {
  // 1. a message
  {
    const m = await client.messages.create({
      model: 'deltallm', max_tokens: 8, system: 'You are terse.', thinking: { type: 'disabled' },
      messages: [{ role: 'user', content: 'Say hello.' }],
    });
    // a random-weight model may draw its end token before the limit: then the stop reason says so
    check(m.type === 'message' && m.role === 'assistant' && m.content.every((c) => c.type === 'text') && ended(m, 8) &&
      m.usage.input_tokens > 0, 'anthropic: messages.create', JSON.stringify(m));
  }
  // 2. streamed: the SDK assembles the events into the same message
  {
    const stream = client.messages.stream({
      model: 'deltallm', max_tokens: 8, thinking: { type: 'disabled' },
      messages: [{ role: 'user', content: [{ type: 'text', text: 'Count.' }] }],
    });
    let text = '', events = 0;
    stream.on('text', (t) => { text += t; });
    stream.on('streamEvent', () => { events++; });
    const m = await stream.finalMessage();
    check(m.content.every((c) => c.type === 'text') && m.content.map((c) => c.text).join('') === text && events >= 5 &&
      ended(m, 8), 'anthropic: messages.stream',
      JSON.stringify({ text, events, m }));
  }
  // 3. a forced tool call, then its result back
  {
    const m = await client.messages.create({
      model: 'deltallm', max_tokens: 64, tools: [weather], tool_choice: { type: 'tool', name: 'get_weather' },
      messages: [{ role: 'user', content: 'Weather in Lima?' }],
    });
    const use = m.content.find((b) => b.type === 'tool_use');
    check(use && use.name === 'get_weather' && ['Paris', 'Tokyo', 'Lima'].includes(use.input.city) &&
      m.stop_reason === 'tool_use', 'anthropic: tools (forced tool_use)', JSON.stringify(m.content));
    if (use) {
      const back = await client.messages.create({
        model: 'deltallm', max_tokens: 6, tools: [weather],
        messages: [
          { role: 'user', content: 'Weather in Lima?' },
          { role: 'assistant', content: m.content },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '18 C, cloudy' }] },
        ],
      });
      check(back.type === 'message' && back.usage.input_tokens > m.usage.input_tokens, 'anthropic: tool_result turn',
        JSON.stringify(back.usage));
    }
    // streamed tool use: input_json_delta assembled by the SDK
    const s = client.messages.stream({
      model: 'deltallm', max_tokens: 64, tools: [weather], tool_choice: { type: 'any' },
      messages: [{ role: 'user', content: 'Weather?' }],
    });
    const sm = await s.finalMessage();
    const su = sm.content.find((b) => b.type === 'tool_use');
    check(su && typeof su.input.city === 'string' && sm.stop_reason === 'tool_use', 'anthropic: streamed tool_use',
      JSON.stringify(sm.content));
  }
  // 4. a refused request is an APIError with status 400; a wrong key with 401
  {
    // the body in Anthropic's error shape: {type: 'error', error: {type, message}}
    const shape = (e) => (e && e.error && e.error.type === 'error' && e.error.error ? e.error.error.type : '');
    let wstatus = 0, wtype = '';
    try {
      await wrong.messages.create({ model: 'deltallm', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] });
    } catch (e) {
      wstatus = e.status;
      wtype = shape(e);
    }
    check(wstatus === 401 && wtype === 'authentication_error', 'anthropic: a wrong x-api-key refused',
      `status ${wstatus} ${wtype}`);
    let status = 0, etype = '';
    try {
      await client.messages.create({ model: 'deltallm', max_tokens: 5, messages: [{ role: 'system', content: 'x' }] });
    } catch (e) {
      status = e.status;
      etype = shape(e);
    }
    check(status === 400 && etype === 'invalid_request_error', 'anthropic: bad role refused', `status ${status} ${etype}`);
  }
}

main().catch((e) => {
  check(false, 'anthropic: unexpected error', e.stack || String(e));
});
