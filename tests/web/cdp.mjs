// cdp.mjs — a minimal Chrome DevTools Protocol client for the browser test: starts Chromium headless with
// --remote-debugging-pipe (commands on fd 3, replies and events on fd 4, each a JSON text ended by a NUL)
// and drives one page the way a person would: real mouse clicks, typed text, key presses.
import { spawn } from 'node:child_process';

// The flags that work on our machines (no sandbox as root, no background traffic on a closed network).
const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
  '--disable-default-apps', '--disable-extensions', '--mute-audio', '--hide-scrollbars'];

export class Browser {
  static async launch(executable, userDataDir) {
    const proc = spawn(executable, [...FLAGS, '--remote-debugging-pipe', `--user-data-dir=${userDataDir}`, 'about:blank'],
      { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'] });
    const b = new Browser(proc);
    await new Promise((resolve, reject) => {
      proc.once('spawn', resolve);
      proc.once('error', reject);
    });
    await b.send('Browser.getVersion');
    return b;
  }

  constructor(proc) {
    this.proc = proc;
    this.nextId = 1;
    this.pending = new Map();
    this.listeners = [];
    this.stderr = '';
    let buf = Buffer.alloc(0);
    proc.stderr.on('data', (d) => (this.stderr = (this.stderr + d).slice(-4000)));
    proc.stdio[4].on('data', (chunk) => {
      buf = Buffer.concat([buf, chunk]);
      let nul;
      while ((nul = buf.indexOf(0)) >= 0) {
        const msg = JSON.parse(buf.subarray(0, nul).toString('utf8'));
        buf = buf.subarray(nul + 1);
        this.dispatch(msg);
      }
    });
    proc.once('exit', () => {
      for (const p of this.pending.values()) p.reject(new Error(`chromium exited: ${this.stderr.slice(-500)}`));
      this.pending.clear();
    });
  }

  dispatch(msg) {
    if (msg.id !== undefined) {
      const p = this.pending.get(msg.id);
      this.pending.delete(msg.id);
      if (!p) return;
      if (msg.error) p.reject(new Error(`${p.method}: ${msg.error.message}`));
      else p.resolve(msg.result);
      return;
    }
    for (const l of this.listeners) if (l.method === msg.method && l.session === msg.sessionId) l.fn(msg.params);
  }

  send(method, params = {}, sessionId = undefined) {
    const id = this.nextId++;
    const msg = { id, method, params };
    if (sessionId) msg.sessionId = sessionId;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, method });
      this.proc.stdio[3].write(JSON.stringify(msg) + '\0');
    });
  }

  on(method, session, fn) {
    this.listeners.push({ method, session, fn });
  }

  async newPage(width, height) {
    const { targetId } = await this.send('Target.createTarget', { url: 'about:blank' });
    const { sessionId } = await this.send('Target.attachToTarget', { targetId, flatten: true });
    const page = new Page(this, sessionId);
    for (const d of ['Page', 'Runtime', 'Log']) await page.send(`${d}.enable`);
    await page.send('Emulation.setDeviceMetricsOverride', { width, height, deviceScaleFactor: 1, mobile: false });
    return page;
  }

  async close() {
    try {
      await Promise.race([this.send('Browser.close'), new Promise((r) => setTimeout(r, 3000))]);
    } catch {}
    if (this.proc.exitCode === null) this.proc.kill('SIGKILL');
  }
}

export class Page {
  constructor(browser, sessionId) {
    this.b = browser;
    this.session = sessionId;
    this.errors = []; // uncaught exceptions, console errors, CSP and other log errors
    browser.on('Runtime.exceptionThrown', sessionId, (p) =>
      this.errors.push(`exception: ${p.exceptionDetails.exception?.description || p.exceptionDetails.text}`));
    browser.on('Runtime.consoleAPICalled', sessionId, (p) => {
      if (p.type === 'error') this.errors.push(`console.error: ${p.args.map((a) => a.value ?? a.description).join(' ')}`);
    });
    browser.on('Log.entryAdded', sessionId, (p) => {
      if (p.entry.level === 'error') this.errors.push(`${p.entry.source}: ${p.entry.text} ${p.entry.url || ''}`);
    });
  }

  send(method, params) {
    return this.b.send(method, params, this.session);
  }

  async goto(url) {
    const loaded = new Promise((resolve) => {
      const l = { method: 'Page.loadEventFired', session: this.session, fn: () => {
        this.b.listeners.splice(this.b.listeners.indexOf(l), 1);
        resolve();
      } };
      this.b.listeners.push(l);
    });
    const r = await this.send('Page.navigate', { url });
    if (r.errorText) throw new Error(`navigate ${url}: ${r.errorText}`);
    await loaded;
  }

  async reload() {
    await this.goto(await this.eval('location.href'));
  }

  // The value of a JS expression in the page (promises awaited).
  async eval(expression) {
    const r = await this.send('Runtime.evaluate', { expression, awaitPromise: true, returnByValue: true });
    if (r.exceptionDetails) throw new Error(`eval ${expression.slice(0, 80)}: ${r.exceptionDetails.exception?.description || r.exceptionDetails.text}`);
    return r.result.value;
  }

  // Waits until expression is truthy; its value, or an error after ms.
  async waitFor(expression, ms = 10000, what = expression) {
    const end = Date.now() + ms;
    for (;;) {
      const v = await this.eval(expression);
      if (v) return v;
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  async click(selector) {
    const box = await this.eval(`(() => { const e = document.querySelector(${JSON.stringify(selector)});
      if (!e) return null; e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();
      return {x: r.x + r.width / 2, y: r.y + r.height / 2, w: r.width}; })()`);
    if (!box || !box.w) throw new Error(`nothing visible to click at ${selector}`);
    for (const type of ['mouseMoved', 'mousePressed', 'mouseReleased'])
      await this.send('Input.dispatchMouseEvent', { type, x: box.x, y: box.y, button: 'left', clickCount: 1 });
  }

  // Focuses a field, selects what it holds and types text over it.
  async fill(selector, text) {
    await this.click(selector);
    await this.eval(`document.querySelector(${JSON.stringify(selector)}).select()`);
    if (text) await this.send('Input.insertText', { text });
    else await this.press('Backspace', 8);
  }

  async press(key, code = key === 'Enter' ? 13 : 0) {
    const text = key === 'Enter' ? '\r' : undefined;
    await this.send('Input.dispatchKeyEvent', { type: 'keyDown', key, code: key, windowsVirtualKeyCode: code, text });
    await this.send('Input.dispatchKeyEvent', { type: 'keyUp', key, code: key, windowsVirtualKeyCode: code });
  }

  async screenshot() {
    const { data } = await this.send('Page.captureScreenshot', { format: 'png' });
    return Buffer.from(data, 'base64');
  }
}
