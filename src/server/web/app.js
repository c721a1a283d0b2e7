// app.js — the chat page: conversations kept in localStorage, replies streamed from this server's
// /v1/chat/completions (SSE), Markdown rendered by markdown.js (DOM nodes, never HTML strings), reasoning
// folded in a <details>, tool calls shown, a stop button (aborts the request: the server cancels the
// job), and the sampling settings. No other origin is contacted (the server's CSP allows none).
import { renderMarkdown } from './markdown.js';

const KEYS = { convs: 'deltallm.conversations.v1', settings: 'deltallm.settings.v1', current: 'deltallm.current.v1' };
const DEFAULTS = {
  apiKey: '', system: '', temperature: 0.8, top_p: 0.95, top_k: 40, min_p: 0.05, max_tokens: '', seed: '',
  thinking: true, tools: '', extra: '',
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
  }
  if (m.finish === 'length') parts.push('cut at the token limit');
  if (m.stopped) parts.push('stopped');
  return parts.join(' \u00b7 ');
}

// One message's element; update() redraws it from the message object (called as a reply streams).
function messageView(m, isLast) {
  const root = el('article', `msg ${m.role}`);
  if (m.role === 'user') {
    root.textContent = m.content;
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

function renderMessages() {
  const box = $('messages');
  const conv = current();
  box.replaceChildren();
  if (!conv || !conv.messages.length) {
    const empty = $('empty-template').content.cloneNode(true);
    if (model) empty.querySelector('.empty-model').textContent = model.id;
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
    if (m.role === 'user') messages.push({ role: 'user', content: m.content });
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
    chat_template_kwargs: { enable_thinking: !!settings.thinking },
  };
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
      m.error = errorText(res.status, await res.text());
      if (res.status === 401) $('key-note').hidden = false;
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
}

function send() {
  const input = $('input');
  const text = input.value.trim();
  if (!text || busy) return;
  const conv = current() || newConv();
  if (!conv.messages.length) conv.title = text.replace(/\s+/g, ' ').slice(0, 60);
  conv.messages.push({ role: 'user', content: text });
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

function openSettings() {
  for (const k of Object.keys(DEFAULTS)) {
    const input = $(`s-${k}`);
    if (input.type === 'checkbox') input.checked = !!settings[k];
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
  if (keyChanged || !model) loadModel();
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
  $('stop').addEventListener('click', stop);
  $('new-chat').addEventListener('click', () => {
    if (!current() || current().messages.length) newConv();
    $('input').focus();
  });
  $('open-settings').addEventListener('click', openSettings);
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
