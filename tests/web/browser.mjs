// browser.mjs — the chat page (src/server/web/) in a real browser: starts `deltallm serve` with a test model
// and an API key, opens http://127.0.0.1:PORT/ in headless Chromium (cdp.mjs) and uses it as a person
// would: enters the key the page asks for, sets greedy sampling, sends a message, waits for the streamed
// reply and checks it against the API's own answer; then reloads (conversations kept), renders a stored
// Markdown reply with hostile HTML in it, makes a forced tool call, stops a reply that would not end, and
// saves a screenshot; then the issue-29 features: default reply limit and sampling from /props, the context
// meter over two turns with their reuse (cached_tokens), the way out of a full context, copy, edit and resend,
// export and import, the count and speed of a stopped reply; then issue 31: no attach button on a server without
// a vision projector, and on one with (DELTALLM_WEB_VL_MODEL, DELTALLM_WEB_MMPROJ, DELTALLM_WEB_PNG) an image
// attached through the file input, shown in the conversation, sent as an image_url data URL (the reply is the
// API's to the same image and text). Prints "ok NAME" / "not ok NAME — why" lines; exit status 0 when all passed.
//
// Environment: DELTALLM_BIN (default build/deltallm), CHROMIUM (default /usr/bin/chromium),
// DELTALLM_TEST_TMP (scratch), DELTALLM_WEB_SCREENSHOT (where the PNG goes; default in the scratch dir),
// DELTALLM_WEB_DEBUG=1 (print the server's log at the end).
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Browser } from './cdp.mjs';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const BIN = resolve(root, process.env.DELTALLM_BIN || 'build/deltallm');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const TMP = process.env.DELTALLM_TEST_TMP || mkdtempSync(join(tmpdir(), 'deltallm-web-'));
const SHOT = resolve(root, process.env.DELTALLM_WEB_SCREENSHOT || join(TMP, 'webui.png'));
const MODEL = join(root, 'tests/data/models/m3-qwen35-dense-bf16.gguf');
const TEMPLATE = join(root, 'tests/data/chat/Qwen3.5-4B.jinja');
const KEY = `web-test-key-${process.pid}`;
const N_FIRST = 600; // tokens of the first reply: enough to arrive over more than one frame even at 10000 tokens/s
const NO_EOG = { 1000: -100, 1001: -100, 1002: -100 }; // the test model's end-of-generation tokens

let failures = 0;
const ok = (name, detail = '') => console.log(`ok ${name}${detail ? ' — ' + detail : ''}`);
const notOk = (name, why) => {
  failures++;
  console.log(`not ok ${name} — ${why}`);
};
const check = (cond, name, why) => (cond ? ok(name) : notOk(name, why));
const words = (s) => (s || '').replace(/[^\p{L}\p{N}]/gu, '');

function startServer(extra) {
  const args = extra || ['serve', '-m', MODEL, '--host', '127.0.0.1', '--port', '0', '-np', '2', '-c', '2048', '-t', '1',
    '--api-key', KEY, '--chat-template-file', TEMPLATE];
  const proc = spawn(BIN, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  proc.stderr.on('data', (d) => (err = (err + d).slice(-4000)));
  return new Promise((resolveStart, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`the server did not start: ${err}`)), 30000);
    proc.stdout.on('data', (d) => {
      out += d;
      const m = /listening on http:\/\/[^ ]*:(\d+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolveStart({ proc, base: `http://127.0.0.1:${m[1]}`, log: () => err });
      }
    });
    proc.once('exit', (code) => reject(new Error(`the server exited (${code}): ${err}`)));
  });
}

const api = (base, path, body) =>
  fetch(base + path, {
    method: body ? 'POST' : 'GET',
    headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' },
    body: body && JSON.stringify(body),
  }).then((r) => r.json());

// The last assistant message as stored by the page and as shown in the DOM.
const LAST = `(() => {
  const convs = JSON.parse(localStorage.getItem('deltallm.conversations.v1') || '[]');
  const cur = convs.find((c) => c.id === JSON.parse(localStorage.getItem('deltallm.current.v1')));
  const msgs = document.querySelectorAll('#messages .msg.assistant');
  const el = msgs[msgs.length - 1];
  return { stored: cur && cur.messages[cur.messages.length - 1], n_convs: convs.length,
           content: el && el.querySelector('.content').textContent,
           reasoning: el && el.querySelector('.reasoning-text').textContent,
           reasoningOpen: el && el.querySelector('details.reasoning').open,
           reasoningHidden: el && el.querySelector('details.reasoning').hidden,
           meta: el && el.querySelector('.meta').textContent,
           tools: el ? [...el.querySelectorAll('.tool-call .tool-name')].map((t) => t.textContent) : [] };
})()`;

async function sendMessage(page, text, ms = 60000) {
  await page.fill('#input', text);
  await page.press('Enter');
  await page.waitFor(`document.body.dataset.state === 'busy'`, 5000, 'the reply to start');
  await page.waitFor(`document.body.dataset.state === 'idle'`, ms, 'the reply to end');
  return page.eval(LAST);
}

async function settingsSave(page, fields) {
  await page.click('#open-settings');
  await page.waitFor(`document.getElementById('settings').open`, 5000, 'the settings dialog');
  for (const [k, v] of Object.entries(fields)) {
    if (typeof v === 'boolean') {
      if ((await page.eval(`document.getElementById('s-${k}').checked`)) !== v) await page.click(`#s-${k}`);
    } else await page.fill(`#s-${k}`, String(v));
  }
  await page.click('#s-save');
  await page.waitFor(`!document.getElementById('settings').open`, 5000, 'the settings to be saved');
}

const MARKDOWN = [
  '## Plan',
  'Here is **bold**, *italic*, `inline code` and a [link](https://example.com).',
  '',
  '- first item',
  '- second item',
  '  1. nested',
  '',
  '```python',
  'def greet(name):',
  '    return f"hello {name}"',
  '```',
  '',
  '| city | °C |',
  '|---|--:|',
  '| Paris | 18 |',
  '',
  '<script>window.pwned = 1</script> <img src=x onerror="window.pwned = 2"> [click](javascript:window.pwned=3)',
].join('\n');

async function main() {
  const server = await startServer();
  const browser = await Browser.launch(CHROMIUM, mkdtempSync(join(TMP, 'chromium-')));
  try {
    // served by the server itself, with a policy that allows no inline or foreign script
    const res = await fetch(server.base + '/');
    const csp = res.headers.get('content-security-policy') || '';
    check(res.status === 200 && /text\/html/.test(res.headers.get('content-type')) && csp.includes("script-src 'self'"),
      'web: / is the chat page', `${res.status} ${res.headers.get('content-type')} csp=${csp}`);

    const page = await browser.newPage(1280, 860);
    await page.goto(server.base + '/');
    // 1. the server wants a key: the page asks for it
    await page.waitFor(`document.getElementById('settings').open && !document.getElementById('key-note').hidden`, 10000,
      'the API key prompt');
    await page.fill('#s-apiKey', KEY);
    await page.fill('#s-temperature', '0');
    await page.fill('#s-max_tokens', String(N_FIRST));
    await page.fill('#s-extra', JSON.stringify({ logit_bias: NO_EOG }));
    await page.click('#s-save');
    const info = await page.waitFor(`document.getElementById('model-info').textContent.includes('m3-qwen35')
      && document.getElementById('model-info').textContent`, 10000, 'the model name');
    ok('web: API key entered, model shown', info);
    check(await page.eval(`document.getElementById('attach').hidden`), 'web: no attach button without --mmproj',
      'the attach button is shown though /props says no vision');

    // 2. a streamed reply, compared with the API's answer to the same request
    // every length the reply had on screen while it streamed
    await page.eval(`window.lengths = []; new MutationObserver(() => {
        const m = [...document.querySelectorAll('#messages .msg.assistant')].pop();
        const n = m ? (m.querySelector('.content').textContent + m.querySelector('.reasoning-text').textContent).length : 0;
        if (n && window.lengths[window.lengths.length - 1] !== n) window.lengths.push(n);
      }).observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true}); 1`);
    // The page must render while the reply streams. A tiny model on a loaded machine can send all 600
    // tokens between two frames, so the reply's body is held once, after its 10th chunk, until the page has
    // had two animation frames (or 500 ms): what is on screen then must be a part of the reply.
    await page.eval(`window.realFetch = window.fetch; window.fetch = async (url, opts) => {
        const res = await window.realFetch(url, opts);
        if (!String(url).includes('/v1/chat/completions') || !res.body) return res;
        const reader = res.body.getReader();
        let n = 0;
        const body = new ReadableStream({ async pull(ctl) {
          const { done, value } = await reader.read();
          if (done) return ctl.close();
          ctl.enqueue(value);
          if (++n === 10) await new Promise((r) => { setTimeout(r, 500);
            requestAnimationFrame(() => requestAnimationFrame(r)); });
        } });
        return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
      }; 1`);
    const t0 = Date.now();
    const got = await sendMessage(page, 'Hello there');
    const ms = Date.now() - t0;
    await page.eval('window.fetch = window.realFetch; 1');
    const lengths = await page.eval('window.lengths');
    const want = await api(server.base, '/v1/chat/completions', {
      messages: [{ role: 'user', content: 'Hello there' }], max_tokens: N_FIRST, temperature: 0, logit_bias: NO_EOG,
      chat_template_kwargs: { enable_thinking: true },
    });
    const wm = want.choices[0].message;
    const s = got.stored || {};
    check((s.content || '') === (wm.content || '') && (s.reasoning || '') === (wm.reasoning_content || ''),
      'web: the streamed reply is the API\'s reply',
      `page ${JSON.stringify([s.reasoning, s.content])} api ${JSON.stringify([wm.reasoning_content, wm.content])}`);
    check(got.reasoning === (wm.reasoning_content || '') && words(got.content) === words(wm.content) &&
      got.reasoningOpen === false && (wm.reasoning_content ? got.reasoningHidden === false : true),
      'web: shown with the reasoning folded', JSON.stringify(got));
    // two lengths at least: one shown before the last (the hold above makes this independent of the speed)
    check(lengths.length >= 2 && got.meta.includes(`${N_FIRST} tokens`), 'web: streamed into the page',
      `lengths on screen ${JSON.stringify(lengths)}, meta '${got.meta}'`);
    ok('web: reply time', `${N_FIRST} tokens in ${ms} ms, shown at ${lengths.length} lengths`);

    // 3. kept across a reload
    await page.reload();
    const again = await page.waitFor(`document.querySelectorAll('#messages .msg').length === 2 && ${LAST}`, 10000,
      'the conversation after a reload');
    check(again.stored.content === s.content && again.content === got.content && again.n_convs === 1,
      'web: the conversation is kept in localStorage', JSON.stringify(again));

    // 4. Markdown: structure rendered, hostile HTML shown as text
    await page.eval(`(() => {
      const convs = JSON.parse(localStorage.getItem('deltallm.conversations.v1'));
      convs.push({id: 'md', title: 'Markdown and a tool call', created: 1, updated: Date.now(), messages: [
        {role: 'user', content: 'Show me some formatting, then call the weather tool.'},
        {role: 'assistant', reasoning: 'The user wants formatting.', content: ${JSON.stringify(MARKDOWN)},
         tool_calls: [{id: 'call_1', type: 'function', function: {name: 'get_weather', arguments: '{"city":"Paris"}'}}],
         timings: {predicted_n: 96, predicted_per_second: 41.5, prompt_n: 30, cache_n: 0}}]});
      localStorage.setItem('deltallm.conversations.v1', JSON.stringify(convs));
      localStorage.setItem('deltallm.current.v1', JSON.stringify('md'));
      return 1; })()`);
    await page.reload();
    await page.waitFor(`document.querySelector('#messages .code-block')`, 10000, 'the Markdown conversation');
    const md = await page.eval(`(() => { const m = document.querySelector('#messages .msg.assistant .content');
      return { h2: m.querySelector('h2')?.textContent, strong: m.querySelector('strong')?.textContent,
        em: m.querySelector('em')?.textContent, code: m.querySelector('pre code.language-python')?.textContent,
        items: m.querySelectorAll('ul > li').length, nested: m.querySelectorAll('ul ol > li').length,
        th: m.querySelectorAll('th').length, right: m.querySelector('td.align-right')?.textContent,
        link: m.querySelector('a[href="https://example.com/"]')?.getAttribute('rel'),
        bad: m.querySelectorAll('script, img, a[href^="javascript"]').length, pwned: window.pwned === undefined ? 0 : window.pwned,
        text: m.textContent.includes('<script>window.pwned = 1</script>'),
        tool: document.querySelector('.tool-call .tool-name')?.textContent }; })()`);
    check(md.h2 === 'Plan' && md.strong === 'bold' && md.em === 'italic' && /return f"hello/.test(md.code || '') &&
      md.items === 2 && md.nested === 1 && md.th === 2 && md.right === '18' && /noopener/.test(md.link || ''),
      'web: Markdown rendered (heading, emphasis, lists, code block, table, link)', JSON.stringify(md));
    check(md.bad === 0 && md.pwned === 0 && md.text, 'web: HTML in a reply is shown as text, never run',
      JSON.stringify(md));
    check(md.tool === 'get_weather', 'web: a stored tool call is shown', JSON.stringify(md));

    // 5. a forced tool call, live
    const weather = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city',
      parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Tokyo'] } }, required: ['city'] } } }];
    await settingsSave(page, { tools: JSON.stringify(weather), extra: '{"tool_choice": "required"}', max_tokens: '64' });
    await page.click('#new-chat');
    const call = await sendMessage(page, 'What is the weather in Paris?');
    check(call.tools.includes('get_weather') && call.stored.tool_calls?.[0]?.function?.name === 'get_weather',
      'web: a tool call the model makes is shown', JSON.stringify(call));

    // 6. stop: a reply that would run to the end of the context
    await settingsSave(page, { tools: '', extra: '{"ignore_eos": true}', max_tokens: '' });
    await page.click('#new-chat');
    await page.fill('#input', 'Tell me a long story');
    await page.press('Enter');
    await page.waitFor(`(() => { const m = document.querySelector('#messages .msg.assistant');
      return m && (m.querySelector('.content').textContent + m.querySelector('.reasoning-text').textContent).length > 20; })()`,
      20000, 'the long reply to stream');
    await page.click('#stop');
    await page.waitFor(`document.body.dataset.state === 'idle'`, 5000, 'the stop button to end the reply');
    const stopped = await page.eval(LAST);
    let busy = -1;
    for (let i = 0; i < 100 && busy !== 0; i++) {
      busy = (await (await fetch(server.base + '/health')).json()).slots.busy;
      if (busy) await new Promise((r) => setTimeout(r, 50));
    }
    check(stopped.stored.stopped === true && /stopped/.test(stopped.meta) && busy === 0,
      'web: Stop ends the reply and frees the server\'s slot', `${JSON.stringify(stopped.meta)} busy slots ${busy}`);
    // its count is the server's (timings_per_token: each chunk carries the tokens so far), not the chunks'
    const shown = +(/(\d+) tokens/.exec(stopped.meta) || [])[1];
    check(shown > 0 && shown === stopped.stored.timings?.predicted_n,
      'web: a stopped reply shows the server\'s token count', `${JSON.stringify(stopped.meta)}, timings ${JSON.stringify(stopped.stored.timings)}`);

    // 7. the screenshot: the Markdown conversation with one more streamed turn
    await settingsSave(page, { extra: '', max_tokens: '40', thinking: false });
    await page.eval(`document.querySelector('#conversations li[data-id="md"] .open').click(); 1`);
    await sendMessage(page, 'Thanks! Now a short summary, please.');
    writeFileSync(SHOT, await page.screenshot());
    ok('web: screenshot', SHOT);

    // 8. issue 29: the defaults, two turns with the context meter and reuse, a conversation that no longer fits,
    // copy, edit and resend, export and import
    await page.click('#open-settings');
    await page.waitFor(`document.getElementById('settings').open`, 5000, 'the settings dialog');
    await page.click('#s-reset');
    const defaults = await page.eval(`({ limit: document.getElementById('s-max_tokens').value,
      temp: document.getElementById('s-temperature').placeholder, thinking: document.getElementById('s-thinking').checked })`);
    const props = await api(server.base, '/props');
    check(defaults.limit === '1024' && defaults.temp.startsWith(String(props.default_generation_settings.params.temperature)) &&
      defaults.thinking === props.thinking_by_default, 'web: a default reply limit, sampling and thinking defaults from /props',
      JSON.stringify([defaults, props.default_generation_settings.params, props.thinking_by_default]));
    await page.fill('#s-temperature', '0');
    await page.fill('#s-max_tokens', '300');
    await page.fill('#s-extra', JSON.stringify({ logit_bias: NO_EOG }));
    await page.click('#s-thinking'); // off: the replies are content, kept in the history that fills the context
    await page.click('#s-save');
    await page.waitFor(`!document.getElementById('settings').open`, 5000, 'the settings to be saved');
    await page.click('#new-chat');
    const empty = await page.eval(`document.querySelector('#messages .empty-text')?.textContent || ''`);
    check(/Reasoning/.test(empty) === props.thinking_by_default, 'web: the empty page speaks of reasoning only for a model that reasons', empty);
    const t1 = await sendMessage(page, 'First question: who are you?');
    const meter1 = await page.eval(`document.getElementById('context-text').textContent`);
    const used1 = t1.stored.usage?.total_tokens;
    check(t1.meta.includes('300 tokens') && meter1.includes(`context ${used1} / 2048`) && meter1.includes('300'),
      'web: the reply limit is sent, the context meter shows the conversation', `${t1.meta} | ${meter1} | ${used1}`);
    const t2 = await sendMessage(page, 'Second question: what can you do?');
    // Qwen3.5's template writes a past reply without the empty think block its turn was generated after: the
    // next turn resumes at turn 1's last header (its last <|im_start|>), the checkpoint the server keeps there
    const cached = t2.stored.timings?.cache_n || 0;
    const rendered = await api(server.base, '/apply-template', { messages: [{ role: 'user', content: 'First question: who are you?' }],
      chat_template_kwargs: { enable_thinking: false } });
    const ids = (await api(server.base, '/tokenize', { content: rendered.prompt })).tokens;
    const imStart = (await api(server.base, '/tokenize', { content: '<|im_start|>' })).tokens[0];
    const header = ids.lastIndexOf(imStart);
    check(cached > 0 && cached === header && t2.meta.includes(`(${cached} cached)`),
      'web: the second turn reuses the first (cached_tokens)', `cached ${cached}, turn 1's last header at ${header}: ${t2.meta}`);
    // copy a whole message
    await page.eval(`[...document.querySelectorAll('#messages .msg.assistant .copy-message')].pop().click(); 1`);
    const copied = await page.eval(`[...document.querySelectorAll('#messages .msg.assistant .copy-message')].pop().textContent`);
    check(copied === 'Copied', 'web: a whole message is copied', copied);
    // the third turn does not fit with a 1500-token limit: the page says so; dropping the oldest turn makes room
    await settingsSave(page, { max_tokens: '1500' });
    await page.fill('#input', 'Third question: and then?');
    await page.press('Enter');
    await page.waitFor(`!document.getElementById('full').hidden`, 20000, 'the context-full message');
    const full = await page.eval(`document.getElementById('full-text').textContent`);
    check(/no longer fits/.test(full) && /2048/.test(full), 'web: a conversation that no longer fits is said to', full);
    await page.click('#drop-oldest');
    await page.waitFor(`document.body.dataset.state === 'idle' && document.getElementById('full').hidden &&
      !document.querySelector('#messages .msg.pending')`, 60000, 'the reply after dropping the oldest turn');
    const dropped = await page.eval(`(() => { const c = JSON.parse(localStorage.getItem('deltallm.conversations.v1'))
      .find((c) => c.id === JSON.parse(localStorage.getItem('deltallm.current.v1')));
      return c.messages.map((m) => m.role + ':' + (m.role === 'user' ? m.content : (m.error ? 'error' : m.finish))); })()`);
    check(dropped.length === 4 && dropped[0].startsWith('user:Second') && dropped[2].startsWith('user:Third') &&
      dropped[3] === 'assistant:length', 'web: the oldest turn dropped, the reply then fits', JSON.stringify(dropped));
    // edit the first message and send it again: the later turns go
    await settingsSave(page, { max_tokens: '40' });
    await page.eval(`document.querySelector('#messages .msg.user .edit').click(); 1`);
    await page.fill('#messages .edit-text', 'An edited question');
    await page.eval(`document.querySelector('#messages .resend').click(); 1`);
    await page.waitFor(`document.body.dataset.state === 'idle' && !document.querySelector('#messages .msg.pending')`, 30000,
      'the reply to the edited message');
    const edited = await page.eval(`[...document.querySelectorAll('#messages .msg')].map((m) => m.className + ':' +
      (m.querySelector('.user-text')?.textContent || ''))`);
    check(edited.length === 2 && edited[0].endsWith(':An edited question'), 'web: a user message edited and sent again',
      JSON.stringify(edited));
    // export every conversation, then import the file back: they come in again, beside the ones there
    await page.eval(`window.__blobs = []; { const o = URL.createObjectURL; URL.createObjectURL = (b) => (window.__blobs.push(b), o.call(URL, b)); } 1`);
    await page.click('#export');
    const exported = await page.eval(`window.__blobs.length ? window.__blobs[0].text() : ''`);
    let ex = null;
    try {
      ex = JSON.parse(exported);
    } catch {}
    const before = await page.eval(`JSON.parse(localStorage.getItem('deltallm.conversations.v1')).length`);
    check(ex && ex.format === 'deltallm-conversations' && ex.conversations.length === before && before >= 4,
      'web: conversations exported as JSON', `${before} conversations, exported ${exported.slice(0, 120)}`);
    await page.eval(`(() => { const dt = new DataTransfer();
      dt.items.add(new File([${JSON.stringify(exported)}], 'conversations.json', { type: 'application/json' }));
      const input = document.getElementById('import-file'); input.files = dt.files;
      input.dispatchEvent(new Event('change')); return 1; })()`);
    await page.waitFor(`JSON.parse(localStorage.getItem('deltallm.conversations.v1')).length === ${2 * before}`, 5000,
      'the imported conversations');
    const imported = await page.eval(`(() => { const c = JSON.parse(localStorage.getItem('deltallm.conversations.v1'));
      return { n: c.length, ids: new Set(c.map((x) => x.id)).size, items: document.querySelectorAll('#conversations li').length,
        banner: document.getElementById('banner').textContent }; })()`);
    check(imported.n === 2 * before && imported.ids === 2 * before && imported.items === 2 * before &&
      /Imported/.test(imported.banner), 'web: conversations imported from JSON', JSON.stringify(imported));
    // a stopped reply shows its token count and speed too
    await settingsSave(page, { max_tokens: '', extra: '{"ignore_eos": true}' });
    await page.click('#new-chat');
    await page.fill('#input', 'Tell me another long story');
    await page.press('Enter');
    // long enough, and on screen at three lengths at least: the server sends what a poll found as one chunk
    // (on a loaded machine the first chunk alone can pass 40 characters), and a speed needs two chunks
    await page.eval(`window.lengths = []; new MutationObserver(() => {
        const m = [...document.querySelectorAll('#messages .msg.assistant')].pop();
        const n = m ? (m.querySelector('.content').textContent + m.querySelector('.reasoning-text').textContent).length : 0;
        if (n && window.lengths[window.lengths.length - 1] !== n) window.lengths.push(n);
      }).observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true}); 1`);
    await page.waitFor(`(() => { const m = document.querySelector('#messages .msg.assistant');
      return m && (m.querySelector('.content').textContent + m.querySelector('.reasoning-text').textContent).length > 40 &&
        window.lengths.length >= 3; })()`,
      20000, 'the long reply to stream');
    await page.click('#stop');
    await page.waitFor(`document.body.dataset.state === 'idle'`, 5000, 'the stop');
    const st = await page.eval(LAST);
    check(/stopped/.test(st.meta) && /\d+ tokens/.test(st.meta) && /t\/s/.test(st.meta),
      'web: a stopped reply shows its tokens and speed', st.meta);

    // the one expected error: the first /v1/models without the key (that is how the page learns it needs one)
    // and the context-full answer (400 from /v1/chat/completions) in step 8
    const errors = page.errors.filter((e) => !/status of 401 .*\/v1\/models/.test(e) &&
      !/status of 400 .*\/v1\/chat\/completions/.test(e));
    check(errors.length === 0 && page.errors.length === 2, 'web: no script errors or policy violations in the page',
      page.errors.join(' | '));
    await imagePart(browser);
  } finally {
    await browser.close();
    if (process.env.DELTALLM_WEB_DEBUG) console.log(server.log());
    server.proc.kill('SIGTERM');
  }
}

// Issue 31: an image attached in the page, on a server with a vision projector.
async function imagePart(browser) {
  const vl = process.env.DELTALLM_WEB_VL_MODEL, mmproj = process.env.DELTALLM_WEB_MMPROJ, png = process.env.DELTALLM_WEB_PNG;
  if (!vl || !mmproj || !png) return notOk('web: image attach', 'no vision test files (DELTALLM_WEB_VL_MODEL ...)');
  const server = await startServer(['serve', '-m', vl, '--mmproj', mmproj, '--host', '127.0.0.1', '--port', '0', '-np',
    '1', '-c', '1024', '-t', '1', '--chat-format', 'qwen35']);
  try {
    const page = await browser.newPage(1280, 860);
    await page.goto(server.base + '/');
    await page.waitFor(`!document.getElementById('attach').hidden`, 10000, 'the attach button (/props modalities.vision)');
    await settingsSave(page, { temperature: '0', max_tokens: '6', extra: '{"ignore_eos": true}', thinking: false });
    // the file input, as a person picking a file would fill it
    const doc = await page.send('DOM.getDocument', {});
    const q = await page.send('DOM.querySelector', { nodeId: doc.root.nodeId, selector: '#attach-file' });
    await page.send('DOM.setFileInputFiles', { nodeId: q.nodeId, files: [png] });
    await page.waitFor(`document.querySelectorAll('#attachments img').length === 1`, 5000, 'the attached image');
    const got = await sendMessage(page, 'Describe it.');
    const shown = await page.eval(`(() => { const u = [...document.querySelectorAll('#messages .msg.user')].pop();
      const img = u && u.querySelector('.user-images img');
      return { src: img ? img.src.slice(0, 22) : '', loaded: !!(img && img.complete && img.naturalWidth === 40),
               pending: document.querySelectorAll('#attachments img').length }; })()`);
    check(shown.src === 'data:image/png;base64,' && shown.loaded && shown.pending === 0,
      'web: the image is shown in the conversation', JSON.stringify(shown));
    const { readFileSync } = await import('node:fs');
    const url = 'data:image/png;base64,' + readFileSync(png).toString('base64');
    const want = await api(server.base, '/v1/chat/completions', {
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url } }, { type: 'text', text: 'Describe it.' }] }],
      max_tokens: 6, temperature: 0, ignore_eos: true, chat_template_kwargs: { enable_thinking: false },
    });
    const health = await api(server.base, '/health');
    const wm = (want.choices && want.choices[0].message) || {};
    const s = got.stored || {};
    check((s.content || '') === (wm.content || '') && health.images && health.images.encoded === 1 &&
      health.images.cache_hits === 1, 'web: the image went as an image_url data URL (the API\'s reply, encoded once)',
      `page ${JSON.stringify(s.content)} api ${JSON.stringify(wm.content)} ${JSON.stringify(health.images)}`);
    check(page.errors.length === 0, 'web: no script errors on the image page', page.errors.join(' | '));
  } finally {
    server.proc.kill('SIGTERM');
  }
}

main()
  .catch((e) => notOk('web: browser test', e.stack || String(e)))
  .finally(() => {
    console.log(failures ? `not ok web: ${failures} failed` : 'ok web: all browser checks passed');
    process.exit(failures ? 1 : 0);
  });
