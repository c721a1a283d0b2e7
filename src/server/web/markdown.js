// markdown.js — a small, safe Markdown renderer for the chat page's replies.
//
// parseMarkdown(text) turns text into a tree of plain objects; renderMarkdown(text, document) builds DOM
// nodes from it with createElement / createTextNode only — text is never parsed as HTML, so whatever the
// model writes (<script>, <img onerror=...>) shows as text. Links keep only http:, https: and mailto: URLs;
// images become links (nothing is fetched). It handles what chat replies use: paragraphs (a single newline
// is a line break), ATX headings, fenced code blocks (an unclosed fence runs to the end, as while a reply
// streams), bullet and numbered lists with nesting, block quotes, tables, rules, and inline code, bold,
// italic, strikethrough, links and bare URLs. Every scan moves forward, so time stays linear-ish in the
// text (bounded searches for closing delimiters).
//
// Tree: blocks {t:'p'|'h'|'code'|'list'|'quote'|'hr'|'table', ...}, inlines {t:'text'|'code'|'strong'|
// 'em'|'del'|'a'|'br', ...}.

const FENCE = /^ {0,3}(`{3,}|~{3,})[ \t]*([^`\s]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const ITEM = /^( {0,3})([-*+]|\d{1,9}[.)])([ \t]+(.*))?$/;
const TABLE_SEP = /^ {0,3}\|?[ \t]*:?-+:?[ \t]*(\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$/;
const SAFE_SCHEMES = ['http:', 'https:', 'mailto:'];
const MAX_CLOSER_TRIES = 32; // candidates looked at for a closing ** / * / ~~ before giving up
const MAX_DEPTH = 16; // nesting of quotes and lists
const MAX_LINK_TEXT = 1000; // characters looked at for the ] of a link

const blank = (line) => /^[ \t]*$/.test(line);

// ------------------------------------------------------------------------------------------ blocks

function startsBlock(line) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || listItem(line) !== null;
}

function listItem(line) {
  const m = ITEM.exec(line);
  if (!m) return null;
  const ordered = /\d/.test(m[2][0]);
  return {
    indent: m[1].length,
    ordered,
    start: ordered ? parseInt(m[2], 10) : 1,
    content: m[4] || '',
    width: m[1].length + m[2].length + (m[3] ? Math.min(m[3].length - (m[4] || '').length, 4) : 1),
  };
}

function splitRow(line) {
  let s = line.trim();
  if (s.startsWith('|')) s = s.slice(1);
  if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1);
  const cells = [];
  let cur = '';
  for (let i = 0; i < s.length; i++) {
    if (s[i] === '\\' && s[i + 1] === '|') {
      cur += '|';
      i++;
    } else if (s[i] === '|') {
      cells.push(cur.trim());
      cur = '';
    } else cur += s[i];
  }
  cells.push(cur.trim());
  return cells;
}

function parseBlocks(lines, depth) {
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (blank(line)) {
      i++;
      continue;
    }
    let m;
    if ((m = FENCE.exec(line))) {
      const fence = m[1];
      const body = [];
      i++;
      while (i < lines.length) {
        const close = lines[i].trim();
        if (close.length >= fence.length && close[0] === fence[0] && /^(`+|~+)$/.test(close)) {
          i++;
          break;
        }
        body.push(lines[i]);
        i++;
      }
      out.push({ t: 'code', lang: m[2].replace(/[^A-Za-z0-9_+#.-]/g, '').slice(0, 32), text: body.join('\n') });
      continue;
    }
    if ((m = HEADING.exec(line))) {
      out.push({ t: 'h', level: m[1].length, c: parseInline(m[2] || '') });
      i++;
      continue;
    }
    if (RULE.test(line)) {
      out.push({ t: 'hr' });
      i++;
      continue;
    }
    if (QUOTE.test(line) && depth < MAX_DEPTH) {
      const inner = [];
      while (i < lines.length && !blank(lines[i])) {
        const q = QUOTE.exec(lines[i]);
        if (!q && startsBlock(lines[i])) break;
        inner.push(q ? q[1] : lines[i]);
        i++;
      }
      out.push({ t: 'quote', c: parseBlocks(inner, depth + 1) });
      continue;
    }
    const item = listItem(line);
    if (item && depth < MAX_DEPTH) {
      const list = { t: 'list', ordered: item.ordered, start: item.start, loose: false, items: [] };
      while (i < lines.length) {
        const it = listItem(lines[i]);
        if (!it || it.ordered !== list.ordered || it.indent > item.indent + 1) break;
        const body = [it.content];
        let loose = false;
        i++;
        while (i < lines.length) {
          const l = lines[i];
          if (blank(l)) {
            // a blank line continues the item only if an indented line follows
            let j = i + 1;
            while (j < lines.length && blank(lines[j])) j++;
            if (j < lines.length && /^[ \t]+/.test(lines[j]) && lines[j].search(/\S/) >= it.width) {
              loose = true;
              for (; i < j; i++) body.push('');
              continue;
            }
            break;
          }
          const indent = l.search(/\S/);
          if (indent >= it.width) body.push(l.slice(it.width));
          else if (listItem(l) || startsBlock(l)) break;
          else body.push(l); // lazy continuation of the item's paragraph
          i++;
        }
        list.loose ||= loose;
        list.items.push(parseBlocks(body, depth + 1));
      }
      out.push(list);
      continue;
    }
    if (line.includes('|') && i + 1 < lines.length && TABLE_SEP.test(lines[i + 1]) && lines[i + 1].includes('-')) {
      const head = splitRow(line);
      const align = splitRow(lines[i + 1]).map((c) =>
        c.startsWith(':') && c.endsWith(':') ? 'center' : c.endsWith(':') ? 'right' : c.startsWith(':') ? 'left' : '',
      );
      const rows = [];
      i += 2;
      while (i < lines.length && !blank(lines[i]) && lines[i].includes('|')) rows.push(splitRow(lines[i++]));
      const n = head.length;
      out.push({
        t: 'table',
        align: align.slice(0, n),
        head: head.map(parseInline),
        rows: rows.map((r) => Array.from({ length: n }, (_, k) => parseInline(r[k] || ''))),
      });
      continue;
    }
    const para = [line];
    i++;
    while (i < lines.length && !blank(lines[i]) && !startsBlock(lines[i])) para.push(lines[i++]);
    out.push({ t: 'p', c: parseInline(para.join('\n')) });
  }
  return out;
}

// ------------------------------------------------------------------------------------------ inlines

const PUNCT = '!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~';
const isSpace = (ch) => ch === undefined || /\s/.test(ch);
const isWord = (ch) => ch !== undefined && /[\p{L}\p{N}]/u.test(ch);

export function safeUrl(url) {
  try {
    const u = new URL(url.trim());
    return SAFE_SCHEMES.includes(u.protocol) ? u.href : null;
  } catch {
    return null;
  }
}

// The closing delimiter for one opened at i (delim of length n): not preceded by a space, and for _ not
// followed by a letter; -1 when none is found within MAX_CLOSER_TRIES candidates.
function findCloser(s, from, delim) {
  let k = from;
  for (let tries = 0; tries < MAX_CLOSER_TRIES; tries++) {
    k = s.indexOf(delim, k);
    if (k < 0) return -1;
    if (delim.length === 2) while (s[k + 2] === delim[0]) k++; // ***: the last two close a **
    const ok = !isSpace(s[k - 1]) && !(delim[0] === '_' && isWord(s[k + delim.length]));
    const longer = delim.length === 1 && s[k + 1] === delim; // * of a ** closes nothing
    if (ok && !longer && k > from) return k;
    k += longer ? 2 : 1;
  }
  return -1;
}

// [text](url "title"): the end of the link (after ')') and its parts, or null.
function parseLink(s, i) {
  let depth = 0;
  let j = i;
  const end = Math.min(s.length, i + MAX_LINK_TEXT);
  for (; j < end; j++) {
    if (s[j] === '\\') j++;
    else if (s[j] === '[') depth++;
    else if (s[j] === ']' && --depth === 0) break;
    else if (s[j] === '\n' && s[j + 1] === '\n') return null;
  }
  if (j >= end || s[j + 1] !== '(') return null;
  const close = s.indexOf(')', j + 2);
  if (close < 0 || close - j > 2048) return null;
  const target = s.slice(j + 2, close).trim().replace(/\s+"[^"]*"$/, '');
  return { text: s.slice(i + 1, j), url: target.replace(/^<(.*)>$/, '$1'), end: close + 1 };
}

export function parseInline(s, depth = 0) {
  const out = [];
  let text = '';
  const flush = () => {
    if (text) out.push({ t: 'text', v: text });
    text = '';
  };
  for (let i = 0; i < s.length; ) {
    const ch = s[i];
    if (ch === '\\' && i + 1 < s.length && PUNCT.includes(s[i + 1])) {
      text += s[i + 1];
      i += 2;
      continue;
    }
    if (ch === '\\' && s[i + 1] === '\n') {
      flush();
      out.push({ t: 'br' });
      i += 2;
      continue;
    }
    if (ch === '\n') {
      text = text.replace(/ +$/, '');
      flush();
      out.push({ t: 'br' });
      i++;
      continue;
    }
    if (ch === '`') {
      let n = 1;
      while (s[i + n] === '`') n++;
      const fence = '`'.repeat(n);
      let k = s.indexOf(fence, i + n);
      while (k >= 0 && s[k + n] === '`') k = s.indexOf(fence, k + n + 1);
      if (k < 0) {
        text += fence;
        i += n;
        continue;
      }
      let code = s.slice(i + n, k).replace(/\n/g, ' ');
      if (code.length > 2 && code[0] === ' ' && code[code.length - 1] === ' ') code = code.slice(1, -1);
      flush();
      out.push({ t: 'code', v: code });
      i = k + n;
      continue;
    }
    if (depth < MAX_DEPTH && (ch === '*' || ch === '_' || (ch === '~' && s[i + 1] === '~'))) {
      const double = s[i + 1] === ch;
      const delim = ch === '~' ? '~~' : double ? ch + ch : ch;
      const opens = !isSpace(s[i + delim.length]) && !(ch === '_' && isWord(s[i - 1]));
      const k = opens ? findCloser(s, i + delim.length, delim) : -1;
      if (k > 0) {
        flush();
        out.push({ t: ch === '~' ? 'del' : delim.length === 2 ? 'strong' : 'em', c: parseInline(s.slice(i + delim.length, k), depth + 1) });
        i = k + delim.length;
        continue;
      }
      text += delim;
      i += delim.length;
      continue;
    }
    if (ch === '!' && s[i + 1] === '[') {
      const l = parseLink(s, i + 1);
      const url = l && safeUrl(l.url);
      if (url) {
        flush();
        out.push({ t: 'a', href: url, c: [{ t: 'text', v: l.text ? `image: ${l.text}` : 'image' }] });
        i = l.end;
        continue;
      }
    }
    if (ch === '[' && depth < MAX_DEPTH) {
      const l = parseLink(s, i);
      const url = l && safeUrl(l.url);
      if (url) {
        flush();
        out.push({ t: 'a', href: url, c: parseInline(l.text, depth + 1) });
        i = l.end;
        continue;
      }
    }
    if (ch === '<') {
      const m = /^<((?:https?|mailto):[^\s<>]+)>/i.exec(s.slice(i, i + 2048));
      const url = m && safeUrl(m[1]);
      if (url) {
        flush();
        out.push({ t: 'a', href: url, c: [{ t: 'text', v: m[1] }] });
        i += m[0].length;
        continue;
      }
    }
    if ((ch === 'h' || ch === 'H') && !isWord(s[i - 1])) {
      const m = /^https?:\/\/[^\s<>"]+/i.exec(s.slice(i, i + 2048));
      if (m) {
        let u = m[0].replace(/[.,;:!?'"]+$/, '');
        if (u.endsWith(')') && !u.includes('(')) u = u.slice(0, -1);
        const url = safeUrl(u);
        if (url) {
          flush();
          out.push({ t: 'a', href: url, c: [{ t: 'text', v: u }] });
          i += u.length;
          continue;
        }
      }
    }
    text += ch;
    i++;
  }
  flush();
  return out;
}

export function parseMarkdown(src) {
  return parseBlocks(String(src).replace(/\r\n?/g, '\n').split('\n'), 0);
}

// ------------------------------------------------------------------------------------------ DOM

function el(doc, tag, cls) {
  const e = doc.createElement(tag);
  if (cls) e.className = cls;
  return e;
}

function renderInlines(doc, parent, nodes) {
  for (const n of nodes) {
    let e;
    switch (n.t) {
      case 'text':
        parent.appendChild(doc.createTextNode(n.v));
        continue;
      case 'br':
        e = el(doc, 'br');
        break;
      case 'code':
        e = el(doc, 'code');
        e.textContent = n.v;
        break;
      case 'a':
        e = el(doc, 'a');
        e.setAttribute('href', n.href);
        e.setAttribute('target', '_blank');
        e.setAttribute('rel', 'noopener noreferrer nofollow');
        renderInlines(doc, e, n.c);
        break;
      default: // strong, em, del
        e = el(doc, n.t);
        renderInlines(doc, e, n.c);
    }
    parent.appendChild(e);
  }
}

function renderBlocks(doc, parent, blocks, tight) {
  for (const b of blocks) {
    let e;
    switch (b.t) {
      case 'p':
        if (tight) {
          renderInlines(doc, parent, b.c);
          continue;
        }
        e = el(doc, 'p');
        renderInlines(doc, e, b.c);
        break;
      case 'h':
        e = el(doc, 'h' + b.level);
        renderInlines(doc, e, b.c);
        break;
      case 'hr':
        e = el(doc, 'hr');
        break;
      case 'quote':
        e = el(doc, 'blockquote');
        renderBlocks(doc, e, b.c, false);
        break;
      case 'code': {
        e = el(doc, 'div', 'code-block');
        const head = el(doc, 'div', 'code-head');
        const lang = el(doc, 'span', 'code-lang');
        lang.textContent = b.lang || 'text';
        const copy = el(doc, 'button', 'copy');
        copy.setAttribute('type', 'button');
        copy.textContent = 'Copy';
        head.appendChild(lang);
        head.appendChild(copy);
        const pre = el(doc, 'pre');
        const code = el(doc, 'code', b.lang ? 'language-' + b.lang : '');
        code.textContent = b.text;
        pre.appendChild(code);
        e.appendChild(head);
        e.appendChild(pre);
        break;
      }
      case 'list':
        e = el(doc, b.ordered ? 'ol' : 'ul');
        if (b.ordered && b.start !== 1) e.setAttribute('start', String(b.start));
        for (const it of b.items) {
          const li = el(doc, 'li');
          renderBlocks(doc, li, it, !b.loose); // a tight list: its paragraphs without <p>
          e.appendChild(li);
        }
        break;
      case 'table': {
        e = el(doc, 'div', 'table-wrap');
        const table = el(doc, 'table');
        const thead = el(doc, 'thead');
        const tr = el(doc, 'tr');
        b.head.forEach((c, k) => {
          const th = el(doc, 'th', b.align[k] ? 'align-' + b.align[k] : '');
          renderInlines(doc, th, c);
          tr.appendChild(th);
        });
        thead.appendChild(tr);
        table.appendChild(thead);
        const tbody = el(doc, 'tbody');
        for (const row of b.rows) {
          const r = el(doc, 'tr');
          row.forEach((c, k) => {
            const td = el(doc, 'td', b.align[k] ? 'align-' + b.align[k] : '');
            renderInlines(doc, td, c);
            r.appendChild(td);
          });
          tbody.appendChild(r);
        }
        table.appendChild(tbody);
        e.appendChild(table);
        break;
      }
      default:
        continue;
    }
    parent.appendChild(e);
  }
}

// A DocumentFragment holding the rendered text (doc: the page's document, or a stand-in with
// createElement, createTextNode and createDocumentFragment).
export function renderMarkdown(src, doc) {
  const frag = doc.createDocumentFragment();
  renderBlocks(doc, frag, parseMarkdown(src), false);
  return frag;
}
