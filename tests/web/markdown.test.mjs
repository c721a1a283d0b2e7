// markdown.test.mjs — src/server/web/markdown.js without a browser: the rendered HTML of many inputs
// (through a stand-in document that records what the renderer builds), hostile input kept as text, and
// linear time on pathological input. Prints ok / not ok lines; exit status 0 when all passed.
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const src = readFileSync(join(dirname(fileURLToPath(import.meta.url)), '../../src/server/web/markdown.js'), 'utf8');
const { renderMarkdown, safeUrl } = await import('data:text/javascript,' + encodeURIComponent(src));

// A document that supports only what the renderer may use; serializing escapes all text, so any markup
// in the output was built as elements on purpose.
const esc = (s) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
class Node {
  constructor(tag) {
    this.tag = tag;
    this.attrs = [];
    this.children = [];
    this.className = '';
  }
  appendChild(c) {
    this.children.push(c);
    return c;
  }
  setAttribute(k, v) {
    this.attrs.push([k, String(v)]);
  }
  set textContent(t) {
    this.children = [{ text: String(t) }];
  }
  html() {
    const inner = this.children.map((c) => (c.text !== undefined ? esc(c.text) : c.html())).join('');
    if (!this.tag) return inner;
    const attrs = (this.className ? [['class', this.className]] : []).concat(this.attrs);
    const a = attrs.map(([k, v]) => ` ${k}="${esc(v)}"`).join('');
    return ['br', 'hr'].includes(this.tag) ? `<${this.tag}${a}>` : `<${this.tag}${a}>${inner}</${this.tag}>`;
  }
}
const doc = {
  createElement: (t) => new Node(t),
  createTextNode: (t) => ({ text: t }),
  createDocumentFragment: () => new Node(null),
};
const html = (md) => renderMarkdown(md, doc).html();

let failures = 0;
function expect(md, want, name = JSON.stringify(md).slice(0, 60)) {
  const got = html(md);
  if (got === want) return;
  failures++;
  console.log(`not ok markdown ${name}\n  got:  ${got}\n  want: ${want}`);
}

const A = ' target="_blank" rel="noopener noreferrer nofollow"';
const code = (lang, text) => `<div class="code-block"><div class="code-head"><span class="code-lang">${lang || 'text'}</span>` +
  `<button class="copy" type="button">Copy</button></div><pre><code${lang ? ` class="language-${lang}"` : ''}>${text}</code></pre></div>`;

expect('hello', '<p>hello</p>');
expect('one\ntwo', '<p>one<br>two</p>', 'a newline is a line break');
expect('one\n\ntwo', '<p>one</p><p>two</p>');
expect('# Title\n### Sub ###', '<h1>Title</h1><h3>Sub</h3>');
expect('#nospace', '<p>#nospace</p>');
expect('**bold** and *it* and __b__ and _i_ and ~~gone~~', '<p><strong>bold</strong> and <em>it</em> and <strong>b</strong> and <em>i</em> and <del>gone</del></p>');
expect('snake_case_name and 2 * 3 * 4', '<p>snake_case_name and 2 * 3 * 4</p>', 'no emphasis inside words or around spaced math');
expect('**unclosed bold', '<p>**unclosed bold</p>');
expect('***both***', '<p><strong><em>both</em></strong></p>');
expect('`a <b>` and ``x ` y``', '<p><code>a &lt;b&gt;</code> and <code>x ` y</code></p>');
expect('\\*not em\\*', '<p>*not em*</p>');
expect('```js\nlet a = "<b>";\n```\nafter', code('js', 'let a = &quot;&lt;b&gt;&quot;;') + '<p>after</p>');
expect('```\nunclosed\nstill code', code('', 'unclosed\nstill code'), 'an unclosed fence runs to the end');
expect('~~~\n```\n~~~', code('', '```'));
expect('- a\n- b\n  - c\n\n1. x\n2. y', '<ul><li>a</li><li>b<ul><li>c</li></ul></li></ul><ol><li>x</li><li>y</li></ol>');
expect('3. three\n4. four', '<ol start="3"><li>three</li><li>four</li></ol>');
expect('- a\n\n  more a\n- b', '<ul><li><p>a</p><p>more a</p></li><li><p>b</p></li></ul>', 'a loose list');
expect('> quoted\n> **text**', '<blockquote><p>quoted<br><strong>text</strong></p></blockquote>');
expect('---', '<hr>');
expect('| a | b |\n|:-|:-:|\n| 1 | 2 |\n| 3 |', '<div class="table-wrap"><table><thead><tr><th class="align-left">a</th>' +
  '<th class="align-center">b</th></tr></thead><tbody><tr><td class="align-left">1</td><td class="align-center">2</td></tr>' +
  '<tr><td class="align-left">3</td><td class="align-center"></td></tr></tbody></table></div>');
expect('[site](https://example.com/x?a=1&b=2 "t")', `<p><a href="https://example.com/x?a=1&amp;b=2"${A}>site</a></p>`);
expect('see https://example.com/a_b.', `<p>see <a href="https://example.com/a_b"${A}>https://example.com/a_b</a>.</p>`);
expect('(https://example.com)', `<p>(<a href="https://example.com/"${A}>https://example.com</a>)</p>`);
expect('<https://example.com>', `<p><a href="https://example.com/"${A}>https://example.com</a></p>`);
expect('![cat](https://example.com/cat.png)', `<p><a href="https://example.com/cat.png"${A}>image: cat</a></p>`,
  'images become links: nothing is fetched');
// hostile input: text, never markup or a live link
expect('<script>alert(1)</script>', '<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>');
expect('<img src=x onerror=alert(1)>', '<p>&lt;img src=x onerror=alert(1)&gt;</p>');
expect('[x](javascript:alert(1))', '<p>[x](javascript:alert(1))</p>');
expect('[x](JaVaScRiPt:alert(1))', '<p>[x](JaVaScRiPt:alert(1))</p>');
expect('[x](data:text/html,<b>)', '<p>[x](data:text/html,&lt;b&gt;)</p>');
expect('[x](vbscript:msgbox)', '<p>[x](vbscript:msgbox)</p>');
expect('```"><script>\nx\n```', code('script', 'x'), 'a fence info string cannot break out of the class');
expect('[a](https://e.com/"onmouseover="x)', `<p><a href="https://e.com/%22onmouseover=%22x"${A}>a</a></p>`);
for (const u of ['javascript:alert(1)', ' javascript:x', 'file:///etc/passwd', '/relative', '//evil.com/x'])
  if (safeUrl(u) !== null) failures++, console.log(`not ok markdown safeUrl(${u}) = ${safeUrl(u)}`);

// pathological input stays fast (the page re-renders a streaming reply on every frame)
const t0 = Date.now();
for (const s of ['*a '.repeat(20000), '**'.repeat(20000), '['.repeat(20000), '`'.repeat(20000),
  '> '.repeat(5000) + 'x', '- '.repeat(5000) + 'x', '_a_'.repeat(10000), 'http://x.y/'.repeat(5000)])
  html(s);
const ms = Date.now() - t0;
if (ms > 3000) failures++, console.log(`not ok markdown pathological inputs took ${ms} ms`);

console.log(failures ? `not ok markdown: ${failures} failed` : `ok markdown: all cases passed (pathological inputs ${ms} ms)`);
process.exit(failures ? 1 : 0);
