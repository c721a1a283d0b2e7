// responses.mjs — the Responses API (POST /v1/responses) with the official `openai` client: responses.create
// (text, reasoning items, usage), previous_response_id, function tools and their outputs sent back, structured
// output through text.format, and responses.stream (semantic events, the final response the client assembles).
import OpenAI from 'openai';
import { BASE, KEY, check, notOk } from './lib.mjs';

const client = new OpenAI({ baseURL: BASE + '/v1', apiKey: KEY, maxRetries: 0, timeout: 120000 });
const weather = {
  type: 'function',
  name: 'get_weather',
  description: 'Current weather for a city',
  parameters: {
    type: 'object',
    properties: { city: { type: 'string', enum: ['Paris', 'Tokyo', 'Lima'] } },
    required: ['city'],
    additionalProperties: false,
  },
  strict: true,
};

async function main() {
  const model = (await client.models.list()).data[0].id;

  // 1. text: a message item (and a reasoning item: the Qwen3.5 template opens <think>)
  const r = await client.responses.create({
    model, instructions: 'You are terse.', input: 'Say hello.', max_output_tokens: 24, temperature: 0,
  });
  const types = r.output.map((o) => o.type);
  check(r.object === 'response' && r.id.startsWith('resp_') && typeof r.output_text === 'string' &&
    types.includes('message') && ['completed', 'incomplete'].includes(r.status),
  'responses: create returns a response with a message', JSON.stringify({ status: r.status, types }));
  check(types[0] === 'reasoning' && r.output[0].content?.[0]?.type === 'reasoning_text',
    'responses: reasoning comes as a reasoning item', JSON.stringify(r.output[0]));
  check(r.usage.input_tokens > 0 && r.usage.output_tokens > 0 && r.usage.output_tokens <= 24 &&
    r.usage.total_tokens === r.usage.input_tokens + r.usage.output_tokens, 'responses: usage', JSON.stringify(r.usage));

  // 2. previous_response_id: the second turn sees the first (more input tokens than the same input alone)
  const alone = await client.responses.create({ model, input: 'And then?', max_output_tokens: 1 });
  const next = await client.responses.create({ model, input: 'And then?', previous_response_id: r.id, max_output_tokens: 4 });
  check(next.previous_response_id === r.id && next.usage.input_tokens > alone.usage.input_tokens + 8,
    'responses: previous_response_id continues the conversation',
    `${next.usage.input_tokens} vs ${alone.usage.input_tokens} alone`);
  const got = await client.responses.retrieve(r.id);
  check(got.id === r.id && got.output_text === r.output_text, 'responses: retrieve by id', got.id);

  // 3. a function call (tool_choice required), then its output sent back with previous_response_id
  const call = await client.responses.create({
    model, input: 'What is the weather in Paris?', tools: [weather], tool_choice: 'required', temperature: 0,
    max_output_tokens: 300,
  });
  const fc = call.output.find((o) => o.type === 'function_call');
  let args = null;
  try {
    args = JSON.parse(fc.arguments);
  } catch {}
  check(fc && fc.name === 'get_weather' && typeof fc.call_id === 'string' && args && ['Paris', 'Tokyo', 'Lima'].includes(args.city),
    'responses: function call item', JSON.stringify(call.output));
  const after = await client.responses.create({
    model, previous_response_id: call.id, tools: [weather], max_output_tokens: 8,
    input: [{ type: 'function_call_output', call_id: fc?.call_id || 'x', output: '{"temperature": 21}' }],
  });
  check(after.status !== 'failed' && after.usage.input_tokens > call.usage.input_tokens,
    'responses: function_call_output continues the call', JSON.stringify(after.usage));

  // 4. structured output through text.format
  const js = await client.responses.create({
    model, input: 'A city.', max_output_tokens: 60, temperature: 1, top_p: 1,
    text: { format: { type: 'json_schema', name: 'city', strict: true, schema: {
      type: 'object', properties: { name: { type: 'string' }, rank: { type: 'integer' } },
      required: ['name', 'rank'], additionalProperties: false } } },
  });
  let parsed = null;
  try {
    parsed = JSON.parse(js.output_text);
  } catch {}
  check(parsed && typeof parsed.name === 'string' && Number.isInteger(parsed.rank) && Object.keys(parsed).length === 2,
    'responses: text.format json_schema', js.output_text);

  // 5. responses.stream: semantic events; the client's final response matches the deltas
  const stream = client.responses.stream({ model, input: 'Tell me something.', max_output_tokens: 40, temperature: 0 });
  const seen = new Set();
  let deltas = '', reasoningDeltas = '', lastSeq = -1, ordered = true;
  for await (const ev of stream) {
    seen.add(ev.type);
    if (ev.sequence_number !== lastSeq + 1) ordered = false;
    lastSeq = ev.sequence_number;
    if (ev.type === 'response.output_text.delta') deltas += ev.delta;
    if (ev.type === 'response.reasoning_text.delta') reasoningDeltas += ev.delta;
  }
  const final = await stream.finalResponse();
  const need = ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added',
    'response.output_item.done'];
  check(need.every((t) => seen.has(t)) && ordered && (seen.has('response.completed') || seen.has('response.incomplete')),
    'responses: stream events', [...seen].join(' '));
  // (the client adds output_text to streamed responses only when it parses them: join the parts)
  const text = final.output.filter((o) => o.type === 'message').flatMap((o) => o.content)
    .filter((c) => c.type === 'output_text').map((c) => c.text).join('');
  const reasoning = final.output.find((o) => o.type === 'reasoning')?.content?.[0]?.text;
  check(text === deltas && reasoning === reasoningDeltas && reasoningDeltas.length > 0,
    'responses: stream final response assembled from the deltas', JSON.stringify({ deltas, text, reasoning }));

  // 6. a streamed function call: arguments delta and done, then the item
  const fstream = client.responses.stream({
    model, input: 'Weather in Tokyo?', tools: [weather], tool_choice: { type: 'function', name: 'get_weather' },
    temperature: 0.8, max_output_tokens: 300,
  });
  let argsDone = null;
  fstream.on('response.function_call_arguments.done', (ev) => { argsDone = ev.arguments; });
  const ffinal = await fstream.finalResponse();
  const ffc = ffinal.output.find((o) => o.type === 'function_call');
  check(ffc && ffc.arguments === argsDone && JSON.parse(argsDone).city, 'responses: streamed function call',
    JSON.stringify({ argsDone, out: ffinal.output }));

  // 7. errors come back as API errors
  try {
    await client.responses.create({ model, input: 'x', previous_response_id: 'resp_unknown' });
    notOk('responses: unknown previous_response_id', 'accepted');
  } catch (e) {
    check(e.status === 400, 'responses: unknown previous_response_id', `status ${e.status}`);
  }
}

main().catch((e) => notOk('responses', e.stack || String(e)));
