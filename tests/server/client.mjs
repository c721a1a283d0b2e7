// client.mjs — the official `openai` npm client against `deltallm serve`: a streamed chat completion (with
// and without reasoning), non-streamed completions (one and several prompts), forced tool calls (streamed
// and not), a second turn that echoes the assistant message and sends the tool result back, the model list,
// and a wrong key.
import OpenAI from 'openai';
import { BASE, KEY, NO_EOG, check, notOk, ok } from './lib.mjs';

const client = new OpenAI({ baseURL: BASE + '/v1', apiKey: KEY, maxRetries: 0, timeout: 120000 });
const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather for a city',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string', enum: ['Paris', 'Tokyo', 'Lima'] },
        unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
      },
      required: ['city'],
    },
  },
};

async function main() {
  const models = await client.models.list();
  const model = models.data[0].id;
  check(models.data.length === 1 && typeof model === 'string', 'client: models.list', JSON.stringify(models.data));

  // 1. streamed chat completion, thinking off: content deltas, finish_reason, usage chunk
  {
    const stream = await client.chat.completions.create({
      model,
      messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Say hello.' }],
      stream: true,
      stream_options: { include_usage: true },
      max_tokens: 16,
      temperature: 0,
      logit_bias: NO_EOG,
      chat_template_kwargs: { enable_thinking: false },
    });
    let content = '', chunks = 0, finish = null, usage = null, role = null;
    for await (const chunk of stream) {
      chunks++;
      if (chunk.usage) usage = chunk.usage;
      const c = chunk.choices[0];
      if (!c) continue;
      if (c.delta.role) role = c.delta.role;
      if (c.delta.content) content += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
    check(role === 'assistant' && content.length > 0 && chunks >= 3, 'client: streamed chat has content deltas',
      `role ${role}, ${chunks} chunks, content ${JSON.stringify(content)}`);
    check(finish === 'length', 'client: streamed chat finish_reason', `finish ${finish}`);
    check(usage && usage.completion_tokens === 16 && usage.prompt_tokens > 0 &&
      typeof usage.prompt_tokens_details?.cached_tokens === 'number', 'client: streamed chat usage', JSON.stringify(usage));
  }

  // 2. streamed chat with reasoning (the Qwen3.5 template opens <think>): reasoning_content, not content
  {
    const stream = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'Think about it.' }], stream: true, max_tokens: 12, temperature: 0,
      logit_bias: NO_EOG,
    });
    let reasoning = '', content = '';
    for await (const chunk of stream) {
      const d = chunk.choices[0]?.delta || {};
      if (d.reasoning_content) reasoning += d.reasoning_content;
      if (d.content) content += d.content;
    }
    check(reasoning.length > 0, 'client: reasoning_content is separated from content',
      `reasoning ${JSON.stringify(reasoning)}, content ${JSON.stringify(content)}`);
  }

  // 3. non-streamed completion
  {
    const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
    const c = r.choices[0];
    check(r.object === 'text_completion' && typeof c.text === 'string' && ['stop', 'length'].includes(c.finish_reason) &&
      r.usage.prompt_tokens > 0 && r.usage.completion_tokens <= 8, 'client: non-streamed completion', JSON.stringify(r));
    const again = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
    check(again.choices[0].text === c.text, 'client: greedy completion is deterministic',
      `${JSON.stringify(c.text)} vs ${JSON.stringify(again.choices[0].text)}`);
    const stopped = await client.completions.create({
      model, prompt: 'Once upon a time', max_tokens: 8, temperature: 0, stop: [c.text.slice(2, 4) || 'zz'],
    });
    check(!stopped.choices[0].text.includes(c.text.slice(2, 4) || 'zz'), 'client: stop string cuts the text',
      JSON.stringify(stopped.choices[0]));
    const batch = await client.completions.create({ model, prompt: ['Once upon a time', 'The river', 'A'], max_tokens: 3 });
    check(batch.choices.length === 3 && batch.choices.every((ch, i) => ch.index === i && typeof ch.text === 'string') &&
      batch.usage.completion_tokens <= 9, 'client: one choice per prompt', JSON.stringify(batch.choices));
  }

  // 4. a tool call (tool_choice required: the call is constrained to the schema), then the tool result
  {
    const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
    const r = await client.chat.completions.create({
      model, messages, tools: [weather], tool_choice: 'required', temperature: 0, max_tokens: 300,
    });
    const c = r.choices[0], call = c.message.tool_calls?.[0];
    let args = null;
    try {
      args = JSON.parse(call.function.arguments);
    } catch {}
    check(c.finish_reason === 'tool_calls' && call?.type === 'function' && call.function.name === 'get_weather' &&
      args && ['Paris', 'Tokyo', 'Lima'].includes(args.city) && typeof call.id === 'string',
    'client: tool call', JSON.stringify(r.choices[0]));
    // the assistant message echoed back as other clients (Vercel AI SDK, LangChain) send it: fields of
    // OpenAI's message types the server does not use are accepted
    messages.push({ ...c.message, refusal: null, annotations: [], audio: null, function_call: null, parsed: null });
    messages.push({ role: 'tool', tool_call_id: call?.id || 'x', content: '{"temperature": 21}' });
    const r2 = await client.chat.completions.create({
      model, messages, tools: [weather], max_tokens: 8, temperature: 0, chat_template_kwargs: { enable_thinking: false },
    });
    check(r2.choices[0].message.role === 'assistant' && r2.usage.prompt_tokens > r.usage.prompt_tokens,
      'client: second turn with the tool result', JSON.stringify(r2.usage));
  }

  // 5. a streamed tool call for a named function: the call arrives as a tool_calls delta
  {
    const stream = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'Weather in Tokyo, in fahrenheit?' }], tools: [weather],
      tool_choice: { type: 'function', function: { name: 'get_weather' } }, stream: true, temperature: 0.8, seed: 3,
      max_tokens: 300,
    });
    const calls = {};
    let finish = null;
    for await (const chunk of stream) {
      const c = chunk.choices[0];
      if (!c) continue;
      for (const tc of c.delta.tool_calls || []) {
        const slot = (calls[tc.index] ||= { name: '', args: '' });
        if (tc.function?.name) slot.name += tc.function.name;
        if (tc.function?.arguments) slot.args += tc.function.arguments;
      }
      if (c.finish_reason) finish = c.finish_reason;
    }
    let args = null;
    try {
      args = JSON.parse(calls[0]?.args);
    } catch {}
    check(finish === 'tool_calls' && calls[0]?.name === 'get_weather' && args && typeof args.city === 'string',
      'client: streamed tool call', JSON.stringify({ finish, calls }));
  }

  // 6. a wrong key is refused
  {
    const bad = new OpenAI({ baseURL: BASE + '/v1', apiKey: 'wrong', maxRetries: 0 });
    try {
      await bad.models.list();
      notOk('client: wrong API key', 'accepted');
    } catch (e) {
      check(e.status === 401, 'client: wrong API key', `status ${e.status}`);
    }
  }
}

main().catch((e) => {
  notOk('client', e.stack || String(e));
});
