// llama.mjs — what llama-server's users send, with the official `openai` npm client against `deltallm serve`:
// n = 2 (two choices of one prompt, streamed with their index), llama.cpp's sampling fields passed through the
// client's extra body, and GBNF grammars (the `grammar` field) on chat and completions.
import OpenAI from 'openai';
import { BASE, KEY, NO_EOG, check } from './lib.mjs';

const client = new OpenAI({ baseURL: BASE + '/v1', apiKey: KEY, maxRetries: 0, timeout: 120000 });

async function main() {
  const model = (await client.models.list()).data[0].id;

  // 1. n = 2, not streamed: two choices, index 0 and 1; greedy: the same text (one state, copied)
  {
    const r = await client.completions.create({ model, prompt: 'In the beginning', max_tokens: 8, temperature: 0, n: 2 });
    check(r.choices.length === 2 && r.choices[0].index === 0 && r.choices[1].index === 1 &&
      r.choices[0].text === r.choices[1].text && r.choices[0].text.length > 0, 'llama: completions n=2 (greedy copies)',
      JSON.stringify(r.choices));
  }
  // 2. n = 2 streamed chat: deltas of both choices, each with its index and a finish_reason
  {
    const stream = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'Tell a story.' }], n: 2, stream: true, max_tokens: 8, seed: 5,
      temperature: 1.2, logit_bias: NO_EOG, chat_template_kwargs: { enable_thinking: false },
    });
    const text = ['', ''], finish = [null, null];
    for await (const chunk of stream)
      for (const c of chunk.choices) {
        if (c.delta?.content) text[c.index] += c.delta.content;
        if (c.finish_reason) finish[c.index] = c.finish_reason;
      }
    check(text[0].length > 0 && text[1].length > 0 && finish[0] === 'length' && finish[1] === 'length',
      'llama: streamed chat n=2 (both indexes)', JSON.stringify({ text, finish }));
    check(text[0] !== text[1], 'llama: the two sampled choices differ', JSON.stringify(text));
  }
  // 3. llama.cpp's sampling fields through the client (extra body fields)
  {
    const r = await client.completions.create({
      model, prompt: 'Once', max_tokens: 6, seed: 2,
      mirostat: 2, mirostat_tau: 4, mirostat_eta: 0.2, dry_multiplier: 0.8, typical_p: 0.9, xtc_probability: 0.3,
      top_n_sigma: 1.5, repetition_penalty: 1.1, min_tokens: 3, samplers: ['dry', 'top_k', 'typ_p', 'temperature'],
    });
    check(r.choices.length === 1 && r.usage.completion_tokens >= 3, 'llama: sampling fields accepted', JSON.stringify(r.usage));
  }
  // 4. a GBNF grammar on completions and chat: the answer is in its language
  {
    const grammar = 'root ::= ("yes" | "no") "!"';
    const r = await client.completions.create({ model, prompt: 'Answer:', max_tokens: 8, grammar });
    check(['yes!', 'no!'].includes(r.choices[0].text), 'llama: grammar on completions', JSON.stringify(r.choices[0].text));
    const c = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'Yes or no?' }], max_tokens: 8, grammar,
    });
    check(['yes!', 'no!'].includes(c.choices[0].message.content), 'llama: grammar on chat',
      JSON.stringify(c.choices[0].message));
  }
}

main().catch((e) => {
  check(false, 'llama: unexpected error', e.stack || String(e));
});
