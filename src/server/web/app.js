// app.js — the chat page: conversations kept in localStorage, replies streamed from this server's
// /v1/chat/completions (SSE), Markdown rendered by markdown.js (DOM nodes, never HTML strings), reasoning
// folded in a <details>, tool calls shown, a stop button (aborts the request: the server cancels the
// job), and the sampling settings. No other origin is contacted (the server's CSP allows none).
// Also: a reply limit by default (max_tokens, a visible setting), the sampling defaults and the model's
// thinking default taken from /props (one set for the server, the CLI and the page), a context meter and a
// way out when a conversation no longer fits (drop the oldest turns), copy / edit-and-resend of a message,
// export and import of the conversations as JSON, and a token count and speed on a stopped reply too.
import { renderMarkdown } from './markdown.js';

const KEYS = { convs: 'deltallm.conversations.v1', settings: 'deltallm.settings.v1', current: 'deltallm.current.v1' };
// '' for a sampling setting: the server's default (shown as the field's placeholder, from /props); thinking
// null: the model's default (its template's)
const DEFAULT_REPLY_LIMIT = 1024;
const DEFAULTS = {
  apiKey: '', system: '', temperature: '', top_p: '', top_k: '', min_p: '', max_tokens: DEFAULT_REPLY_LIMIT, seed: '',
  thinking: null, tools: '', extra: '',
};
const NUMERIC = ['temperature', 'top_p', 'top_k', 'min_p', 'max_tokens', 'seed'];

const $ = (id) => document.getElementById(id);
const el = (tag, cls, text) => {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
};

// ------------------------------------------------------------------------------------------ storage

function load(key, fallback) {
  try {
    const v = JSON.parse(localStorage.getItem(key));
    return v === null || v === undefined ? fallback : v;
  } catch {
    return fallback;
  }
}
function save(key, value) {
  try {
    localStorage.setItem(key, JSON.stringify(value));
  } catch (e) {
    banner(`Could not save in this browser's storage: ${e.message}`);
  }
}

const validConv = (c) => c && typeof c.id === 'string' && Array.isArray(c.messages);
let settings = { ...DEFAULTS, ...load(KEYS.settings, {}) };
let convs = load(KEYS.convs, []).filter(validConv);
let currentId = load(KEYS.current, null);
let model = null; // the server's model object (/v1/models)
let props = null; // the server's /props: n_ctx, default sampling, thinking_by_default
let busy = null; // the reply being generated: {controller, conv, msg, view}

const saveConvs = () => save(KEYS.convs, convs);
const current = () => convs.find((c) => c.id === currentId) || null;
const newId = () => Date.now().toString(36) + Math.random().toString(36).slice(2, 8);

// ------------------------------------------------------------------------------------------ rendering

function banner(text) {
  const b = $('banner');
  b.textContent = text || '';
  b.hidden = !text;
}

function renderSidebar() {
  const list = $('conversations');
  list.replaceChildren();
  for (const c of [...convs].sort((a, b) => (b.updated || 0) - (a.updated || 0))) {
    const li = el('li', c.id === currentId ? 'current' : '');
    li.dataset.id = c.id;
    const open = el('button', 'open', c.title || 'New chat');
    open.type = 'button';
    open.title = c.title || '';
    open.addEventListener('click', () => selectConv(c.id));
    const del = el('button', 'delete', '\u00d7');
    del.type = 'button';
    del.title = 'Delete this conversation';
    del.addEventListener('click', () => deleteConv(c.id));
    li.append(open, del);
    list.appendChild(li);
  }
}

function formatMeta(m) {
  const parts = [];
  const t = m.timings;
  if (t && t.predicted_n !== undefined) {
    parts.push(`${t.predicted_n} tokens`);
    if (t.predicted_per_second > 0) parts.push(`${t.predicted_per_second.toFixed(1)} t/s`);
    if (t.prompt_n !== undefined) parts.push(`prompt ${t.prompt_n + (t.cache_n || 0)} (${t.cache_n || 0} cached)`);
  } else if (m.counted && m.counted.n) {
    // no timings from the server (one without timings_per_token, stopped): what the page counted as it streamed
    const c = m.counted;
    parts.push(`${c.n} tokens`);
    if (c.t1 > c.t0 && c.n > 1) parts.push(`${((c.n - 1) / ((c.t1 - c.t0) / 1000)).toFixed(1)} t/s`);
  }
  if (m.finish === 'length') parts.push('cut at the token limit');
  if (m.stopped) parts.push('stopped');
  return parts.join(' \u00b7 ');
}

// One message's element; update() redraws it from the message object (called as a reply streams).
function messageView(m, isLast) {
  const root = el('article', `msg ${m.role}`);
  if (m.role === 'user') {
    const text = el('div', 'user-text', m.content);
    const meta = el('div', 'meta');
    meta.append(copyButton(() => m.content), button('edit', 'Edit', 'Edit this message and send it again', () => editMessage(m, root)));
    if (m.images && m.images.length) {
      const pics = el('div', 'user-images');
      for (const url of m.images) {
        const img = document.createElement('img');
        img.src = url; // a data: URL the page made from the user's file (the policy allows data: images only)
        img.alt = 'attached image';
        pics.append(img);
      }
      root.append(pics);
    }
    root.append(text, meta);
    return { root, update() {} };
  }
  const reasoning = el('details', 'reasoning');
  const summary = el('summary');
  const rtext = el('div', 'reasoning-text');
  reasoning.append(summary, rtext);
  const content = el('div', 'content');
  const tools = el('div', 'tool-calls');
  const meta = el('div', 'meta');
  root.append(reasoning, content, tools, meta);
  let shown = { content: null, reasoning: null, tools: null };
  const update = () => {
    root.classList.toggle('pending', !!m.pending);
    root.classList.toggle('error', !!m.error);
    reasoning.hidden = !m.reasoning;
    summary.textContent = m.pending && !m.content && !(m.tool_calls || []).length ? 'Thinking\u2026' : 'Reasoning';
    if (shown.reasoning !== m.reasoning) rtext.textContent = m.reasoning || '';
    if (shown.content !== m.content || m.error) {
      content.replaceChildren(renderMarkdown(m.content || '', document));
      if (m.error) content.appendChild(el('p', 'error', m.error));
    }
    const calls = JSON.stringify(m.tool_calls || []);
    if (shown.tools !== calls) {
      tools.replaceChildren();
      for (const c of m.tool_calls || []) {
        const d = el('details', 'tool-call');
        const s = el('summary');
        s.append('Tool call: ', el('code', 'tool-name', c.function?.name || '?'));
        let args = c.function?.arguments || '';
        try {
          args = JSON.stringify(JSON.parse(args), null, 2);
        } catch {}
        d.append(s, el('pre', 'tool-args', args));
        tools.appendChild(d);
      }
    }
    shown = { content: m.content, reasoning: m.reasoning, tools: calls };
    meta.replaceChildren();
    const text = formatMeta(m);
    if (text) meta.appendChild(el('span', 'stats', text));
    if (!m.pending && (m.content || m.reasoning)) meta.appendChild(copyButton(() => m.content || m.reasoning || ''));
    if (isLast && !m.pending) {
      const again = el('button', 'regenerate', 'Regenerate');
      again.type = 'button';
      again.addEventListener('click', regenerate);
      meta.appendChild(again);
    }
  };
  update();
  return { root, update };
}

function button(cls, label, title, onClick) {
  const b = el('button', cls, label);
  b.type = 'button';
  if (title) b.title = title;
  b.addEventListener('click', onClick);
  return b;
}

async function copyText(text, b) {
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    const t = el('textarea');
    t.value = text;
    document.body.appendChild(t);
    t.select();
    document.execCommand('copy');
    t.remove();
  }
  b.textContent = 'Copied';
  setTimeout(() => (b.textContent = 'Copy'), 1200);
}

const copyButton = (get) => {
  const b = button('copy-message', 'Copy', 'Copy the whole message', () => copyText(get(), b));
  return b;
};

// Edit a user message in place; Send replaces it and drops what came after it, then asks again.
function editMessage(m, root) {
  if (busy) return;
  const conv = current();
  const at = conv ? conv.messages.indexOf(m) : -1;
  if (at < 0) return;
  const box = el('textarea', 'edit-text');
  box.value = m.content;
  const resend = button('resend primary', 'Send', 'Send the edited message (the later turns are dropped)', () => {
    const text = box.value.trim();
    if (!text || busy) return;
    const images = m.images;
    conv.messages.splice(at);
    conv.messages.push(images && images.length ? { role: 'user', content: text, images } : { role: 'user', content: text });
    if (at === 0) conv.title = text.replace(/\s+/g, ' ').slice(0, 60);
    generate(conv);
  });
  const cancel = button('cancel', 'Cancel', '', () => renderMessages());
  const bar = el('div', 'meta');
  bar.append(resend, cancel);
  root.replaceChildren(box, bar);
  box.focus();
}

// The context meter: the tokens the conversation holds (the last reply's prompt + reply, as the server counted
// them) out of the model's context, with the reply limit that the next turn reserves.
function contextUse(conv) {
  let used = 0;
  for (const m of conv ? conv.messages : []) {
    if (m.role !== 'assistant') continue;
    if (m.usage && m.usage.total_tokens) used = m.usage.total_tokens;
    else if (m.timings && m.timings.prompt_n !== undefined)
      used = m.timings.prompt_n + (m.timings.cache_n || 0) + (m.timings.predicted_n || 0);
  }
  return used;
}

function renderContext() {
  const meter = $('context');
  const n = props && props.n_ctx;
  if (!n) {
    meter.hidden = true;
    return;
  }
  const used = contextUse(current());
  const limit = Number(settings.max_tokens) || 0;
  meter.hidden = false;
  $('context-bar').value = Math.min(used, n);
  $('context-bar').max = n;
  $('context-text').textContent =
    `context ${used} / ${n} tokens` + (limit ? ` \u00b7 replies up to ${limit} tokens` : ' \u00b7 no reply limit');
  meter.classList.toggle('full', used + limit > n);
}

// The conversation no longer fits: say so, and offer to drop the oldest turns (then send again).
function showFull(conv, message) {
  const box = $('full');
  $('full-text').textContent = message;
  box.hidden = false;
  $('drop-oldest').onclick = () => {
    box.hidden = true;
    dropOldest(conv);
  };
}

function dropOldest(conv) {
  if (busy) return;
  while (conv.messages.length && (conv.messages[conv.messages.length - 1].error || conv.messages[conv.messages.length - 1].pending))
    conv.messages.pop();
  // drop the first user turn and its replies, keeping the last user message (the one to answer)
  const firstUser = conv.messages.findIndex((m) => m.role === 'user');
  const nextUser = conv.messages.findIndex((m, i) => i > firstUser && m.role === 'user');
  if (firstUser < 0 || nextUser < 0) {
    banner('Only one message is left and it does not fit: shorten it or lower the reply limit in Settings.');
    return;
  }
  conv.messages.splice(firstUser, nextUser - firstUser);
  conv.dropped = (conv.dropped || 0) + 1;
  saveConvs();
  generate(conv);
}

function renderMessages() {
  const box = $('messages');
  const conv = current();
  box.replaceChildren();
  $('full').hidden = true;
  renderContext();
  if (!conv || !conv.messages.length) {
    const empty = $('empty-template').content.cloneNode(true);
    if (model) empty.querySelector('.empty-model').textContent = model.id;
    // only a model that reasons by default is said to
    const thinks = props ? props.thinking_by_default : false;
    empty.querySelector('.empty-text').textContent = thinks
      ? 'Replies stream as they are generated. Reasoning is folded away; open it to read.'
      : 'Replies stream as they are generated.';
    box.appendChild(empty);
    return;
  }
  conv.messages.forEach((m, i) => {
    const v = messageView(m, i === conv.messages.length - 1 && m.role === 'assistant');
    if (busy && busy.msg === m) busy.view = v;
    box.appendChild(v.root);
  });
  box.scrollTop = box.scrollHeight;
}

function render() {
  renderSidebar();
  renderMessages();
  $('title').textContent = current()?.title || 'deltallm';
}

function setBusy(on) {
  document.body.dataset.state = on ? 'busy' : 'idle';
  $('send').hidden = on;
  $('stop').hidden = !on;
}

// ------------------------------------------------------------------------------------------ conversations

function selectConv(id) {
  currentId = id;
  save(KEYS.current, currentId);
  document.body.classList.remove('sidebar-open');
  render();
}

function newConv() {
  const c = { id: newId(), title: 'New chat', created: Date.now(), updated: Date.now(), messages: [] };
  convs.push(c);
  saveConvs();
  selectConv(c.id);
  return c;
}

function deleteConv(id) {
  const c = convs.find((x) => x.id === id);
  if (!c || !confirm(`Delete "${c.title}"?`)) return;
  if (busy && busy.conv === c) busy.controller.abort();
  convs = convs.filter((x) => x !== c);
  saveConvs();
  if (currentId === id) currentId = null;
  save(KEYS.current, currentId);
  render();
}

// ------------------------------------------------------------------------------------------ the API

function headers() {
  const h = { 'Content-Type': 'application/json' };
  if (settings.apiKey) h.Authorization = `Bearer ${settings.apiKey}`;
  return h;
}

function errorText(status, body) {
  try {
    const j = JSON.parse(body);
    if (j.error && j.error.message) return `${status}: ${j.error.message}`;
  } catch {}
  return `${status}: ${body.slice(0, 300)}`;
}

async function loadModel() {
  try {
    const r = await fetch('/v1/models', { headers: headers() });
    if (r.status === 401) {
      $('key-note').hidden = false;
      $('model-info').textContent = 'API key needed';
      openSettings();
      return;
    }
    if (!r.ok) throw new Error(errorText(r.status, await r.text()));
    model = (await r.json()).data[0];
    $('key-note').hidden = true;
    try {
      const p = await fetch('/props', { headers: headers() });
      if (p.ok) props = await p.json();
    } catch {}
    $('attach').hidden = !visionOn(); // the attach button only where the server takes images
    const meta = model.meta || {};
    $('model-info').textContent = [model.id, meta.arch, meta.n_ctx && `context ${meta.n_ctx}`]
      .filter(Boolean)
      .join(' \u00b7 ');
    banner('');
    if (!busy) renderMessages();
  } catch (e) {
    banner(`Cannot reach the server: ${e.message}`);
  }
}

function requestBody(conv) {
  const messages = [];
  if (settings.system.trim()) messages.push({ role: 'system', content: settings.system });
  for (const m of conv.messages) {
    if (m.pending || m.error) continue;
    if (m.role === 'user' && m.images && m.images.length)
      messages.push({ role: 'user', content: [...m.images.map((url) => ({ type: 'image_url', image_url: { url } })),
        { type: 'text', text: m.content }] });
    else if (m.role === 'user') messages.push({ role: 'user', content: m.content });
    else if (m.role === 'assistant') {
      const a = { role: 'assistant', content: m.content || '' };
      if (m.tool_calls && m.tool_calls.length) a.tool_calls = m.tool_calls;
      messages.push(a);
    }
  }
  const body = {
    model: model ? model.id : 'default',
    messages,
    stream: true,
    stream_options: { include_usage: true },
    timings_per_token: true, // every chunk carries the counts so far: a stopped reply still shows its tokens
  };
  if (settings.thinking !== null && settings.thinking !== undefined)
    body.chat_template_kwargs = { enable_thinking: !!settings.thinking };
  for (const k of NUMERIC) if (settings[k] !== '' && settings[k] !== null) body[k] = Number(settings[k]);
  if (settings.tools.trim()) body.tools = JSON.parse(settings.tools);
  if (settings.extra.trim()) Object.assign(body, JSON.parse(settings.extra));
  return body;
}

// Calls onEvent(object) for each SSE data event of a fetch response.
async function readEvents(res, onEvent) {
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      const data = event
        .split('\n')
        .filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).replace(/^ /, ''))
        .join('\n');
      if (!data || data === '[DONE]') continue;
      onEvent(JSON.parse(data));
    }
  }
}

function applyChunk(m, ev) {
  if (ev.error) {
    m.error = ev.error.message || JSON.stringify(ev.error);
    return;
  }
  const ch = ev.choices && ev.choices[0];
  if (ch && ch.delta) {
    const d = ch.delta;
    if (d.reasoning_content) m.reasoning += d.reasoning_content;
    if (d.content) m.content += d.content;
    for (const tc of d.tool_calls || []) {
      const k = tc.index ?? m.tool_calls.length;
      const call = (m.tool_calls[k] ||= { id: tc.id, type: 'function', function: { name: '', arguments: '' } });
      if (tc.id) call.id = tc.id;
      if (tc.function?.name) call.function.name += tc.function.name;
      if (tc.function?.arguments) call.function.arguments += tc.function.arguments;
    }
  }
  if (ch && ch.finish_reason) m.finish = ch.finish_reason;
  if (ev.timings) m.timings = ev.timings;
  if (ev.usage) m.usage = ev.usage;
  if (ch && ch.delta && (ch.delta.content || ch.delta.reasoning_content || ch.delta.tool_calls)) {
    const now = Date.now();
    m.counted ||= { n: 0, t0: now, t1: now };
    m.counted.n++;
    m.counted.t1 = now;
  }
}

async function generate(conv) {
  const m = { role: 'assistant', content: '', reasoning: '', tool_calls: [], pending: true };
  let body;
  try {
    body = requestBody(conv);
  } catch (e) {
    m.pending = false;
    m.error = `The settings' JSON does not parse: ${e.message}`;
    conv.messages.push(m);
    saveConvs();
    render();
    return;
  }
  conv.messages.push(m);
  conv.updated = Date.now();
  const controller = new AbortController();
  busy = { controller, conv, msg: m, view: null };
  setBusy(true);
  render();
  let frame = 0;
  let full = null;
  let lastSave = Date.now();
  const redraw = () => {
    frame = 0;
    if (!busy || busy.msg !== m || !busy.view) return;
    const box = $('messages');
    const atEnd = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
    busy.view.update();
    if (atEnd) box.scrollTop = box.scrollHeight;
  };
  try {
    const res = await fetch('/v1/chat/completions', {
      method: 'POST',
      headers: headers(),
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    if (!res.ok) {
      const text = await res.text();
      m.error = errorText(res.status, text);
      if (res.status === 401) $('key-note').hidden = false;
      if (/context_length_exceeded/.test(text)) full = m.error.replace(/^\d+: /, '');
    } else {
      await readEvents(res, (ev) => {
        applyChunk(m, ev);
        if (!frame) frame = requestAnimationFrame(redraw);
        if (Date.now() - lastSave > 1000) saveConvs(), (lastSave = Date.now());
      });
    }
  } catch (e) {
    if (e.name === 'AbortError') m.stopped = true;
    else m.error = `The request failed: ${e.message}`;
  }
  if (frame) cancelAnimationFrame(frame);
  m.pending = false;
  busy = null;
  setBusy(false);
  saveConvs();
  render();
  if (full)
    showFull(conv, `This conversation no longer fits the model's context: ${full} Drop the oldest turns to go on, ` +
      'or lower the reply limit in Settings.');
}

// Images for the next message (data: URLs), when the server has a vision projector (/props modalities.vision).
let pending = [];
const visionOn = () => !!(props && props.modalities && props.modalities.vision);

function renderPending() {
  const box = $('attachments');
  box.replaceChildren();
  pending.forEach((url, i) => {
    const item = el('div', 'attachment');
    const img = document.createElement('img');
    img.src = url;
    img.alt = 'image to send';
    item.append(img, button('remove', '\u00d7', 'Remove this image', () => {
      pending.splice(i, 1);
      renderPending();
    }));
    box.append(item);
  });
  box.hidden = !pending.length;
}

function addImages(files) {
  if (!visionOn()) return;
  for (const f of files) {
    if (!/^image\/(png|jpeg)$/.test(f.type)) {
      banner(`${f.name || 'the pasted file'}: only PNG and JPEG images can be sent`);
      continue;
    }
    const r = new FileReader();
    r.onload = () => {
      pending.push(r.result);
      renderPending();
    };
    r.readAsDataURL(f);
  }
}

function send() {
  const input = $('input');
  const text = input.value.trim();
  if ((!text && !pending.length) || busy) return;
  const conv = current() || newConv();
  if (!conv.messages.length) conv.title = (text || 'Image').replace(/\s+/g, ' ').slice(0, 60);
  conv.messages.push(pending.length ? { role: 'user', content: text, images: pending } : { role: 'user', content: text });
  pending = [];
  renderPending();
  input.value = '';
  autosize();
  generate(conv);
}

function regenerate() {
  const conv = current();
  if (!conv || busy) return;
  while (conv.messages.length && conv.messages[conv.messages.length - 1].role === 'assistant') conv.messages.pop();
  if (conv.messages.length) generate(conv);
}

function stop() {
  if (busy) busy.controller.abort();
}

// ------------------------------------------------------------------------------------------ settings

const modelThinks = () => !!(props && props.thinking_by_default);

function openSettings() {
  const dp = (props && props.default_generation_settings && props.default_generation_settings.params) || {};
  for (const k of ['temperature', 'top_p', 'top_k', 'min_p'])
    $(`s-${k}`).placeholder = dp[k] !== undefined ? `${dp[k]} (server default)` : 'server default';
  for (const k of Object.keys(DEFAULTS)) {
    const input = $(`s-${k}`);
    if (input.type === 'checkbox') input.checked = settings[k] === null || settings[k] === undefined ? modelThinks() : !!settings[k];
    else input.value = settings[k] ?? '';
  }
  $('settings-error').textContent = '';
  if (!$('settings').open) $('settings').showModal();
}

function saveSettings() {
  const next = {};
  for (const k of Object.keys(DEFAULTS)) {
    const input = $(`s-${k}`);
    next[k] = input.type === 'checkbox' ? input.checked : input.value;
  }
  if (next.thinking === modelThinks()) next.thinking = null; // the model's default: not sent
  for (const k of NUMERIC) next[k] = next[k] === '' ? '' : Number(next[k]);
  for (const k of ['tools', 'extra']) {
    if (!next[k].trim()) continue;
    try {
      const v = JSON.parse(next[k]);
      if (k === 'tools' ? !Array.isArray(v) : typeof v !== 'object' || Array.isArray(v) || v === null)
        throw new Error(k === 'tools' ? 'not an array' : 'not an object');
    } catch (e) {
      $('settings-error').textContent = `${k === 'tools' ? 'Tools' : 'More request fields'}: ${e.message}`;
      return;
    }
  }
  const keyChanged = next.apiKey !== settings.apiKey;
  settings = next;
  save(KEYS.settings, settings);
  $('settings').close();
  renderContext();
  if (keyChanged || !model) loadModel();
}

// ------------------------------------------------------------------------------------------ export, import

function exportConvs() {
  const data = JSON.stringify({ format: 'deltallm-conversations', version: 1, exported: new Date().toISOString(),
    conversations: convs }, null, 1);
  const url = URL.createObjectURL(new Blob([data], { type: 'application/json' }));
  const a = el('a');
  a.href = url;
  a.download = `deltallm-conversations-${new Date().toISOString().slice(0, 10)}.json`;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

async function importConvs(file) {
  try {
    const data = JSON.parse(await file.text());
    const list = (Array.isArray(data) ? data : data && data.conversations) || [];
    const ok = list.filter((c) => validConv(c) && c.messages.every((m) => m && typeof m.role === 'string'));
    if (!ok.length) throw new Error('no conversations in it');
    const ids = new Set(convs.map((c) => c.id));
    for (const c of ok) {
      c.messages = c.messages.map((m) => ({ ...m, pending: false }));
      if (ids.has(c.id)) c.id = newId();
      ids.add(c.id);
      c.updated ||= Date.now();
      convs.push(c);
    }
    saveConvs();
    currentId = ok[ok.length - 1].id;
    save(KEYS.current, currentId);
    render();
    banner(`Imported ${ok.length} conversation${ok.length > 1 ? 's' : ''}.`);
    setTimeout(() => banner(''), 3000);
  } catch (e) {
    banner(`Could not import ${file.name}: ${e.message}`);
  }
}

// ------------------------------------------------------------------------------------------ wiring

function autosize() {
  const t = $('input');
  t.style.height = 'auto';
  t.style.height = `${Math.min(t.scrollHeight, window.innerHeight * 0.4)}px`;
}

async function copyCode(button) {
  const code = button.closest('.code-block')?.querySelector('pre code');
  if (!code) return;
  try {
    await navigator.clipboard.writeText(code.textContent);
  } catch {
    const range = document.createRange();
    range.selectNodeContents(code);
    getSelection().removeAllRanges();
    getSelection().addRange(range);
    document.execCommand('copy');
  }
  button.textContent = 'Copied';
  setTimeout(() => (button.textContent = 'Copy'), 1200);
}

function init() {
  // the empty-state block is kept as a template to restore when a conversation is empty
  const tpl = document.createElement('template');
  tpl.id = 'empty-template';
  tpl.content.appendChild($('empty'));
  document.body.appendChild(tpl);

  $('send').addEventListener('click', send);
  $('attach').addEventListener('click', () => $('attach-file').click());
  $('attach-file').addEventListener('change', (e) => {
    addImages([...(e.target.files || [])]);
    e.target.value = '';
  });
  $('stop').addEventListener('click', stop);
  $('new-chat').addEventListener('click', () => {
    if (!current() || current().messages.length) newConv();
    $('input').focus();
  });
  $('open-settings').addEventListener('click', openSettings);
  $('export').addEventListener('click', exportConvs);
  $('import').addEventListener('click', () => $('import-file').click());
  $('import-file').addEventListener('change', (e) => {
    const f = e.target.files && e.target.files[0];
    if (f) importConvs(f);
    e.target.value = '';
  });
  $('s-save').addEventListener('click', saveSettings);
  $('s-cancel').addEventListener('click', () => $('settings').close());
  $('s-reset').addEventListener('click', () => {
    const key = settings.apiKey;
    settings = { ...DEFAULTS, apiKey: key };
    openSettings();
  });
  $('toggle-sidebar').addEventListener('click', () => document.body.classList.toggle('sidebar-open'));
  $('messages').addEventListener('click', (e) => {
    if (e.target.matches('.code-block .copy')) copyCode(e.target);
  });
  const input = $('input');
  input.addEventListener('input', autosize);
  input.addEventListener('paste', (e) => {
    const files = [...((e.clipboardData && e.clipboardData.files) || [])].filter((f) => f.type.startsWith('image/'));
    if (files.length && visionOn()) {
      e.preventDefault();
      addImages(files);
    }
  });
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      send();
    } else if (e.key === 'Escape') stop();
  });
  window.addEventListener('storage', (e) => {
    // another tab changed the conversations: take its copy unless this tab is streaming
    if (e.key === KEYS.convs && !busy) {
      convs = load(KEYS.convs, []).filter(validConv);
      render();
    }
  });
  setBusy(false);
  render();
  loadModel();
  input.focus();
}

init();
