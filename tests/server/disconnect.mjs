// disconnect.mjs — a client that goes away frees its slot at once: every slot busy with a long stream,
// the clients abort after the first chunk, /health shows the slots idle within a second, and a new
// request is served right away. The same for a non-streamed request.
import { BASE, NO_EOG, authHeaders, check, health, notOk, post, waitBusy } from './lib.mjs';

async function main() {
  const slots = (await health()).slots.total;
  const aborts = [];
  const first = [];
  for (let i = 0; i < slots; i++) {
    const ac = new AbortController();
    aborts.push(ac);
    const res = await fetch(BASE + '/v1/chat/completions', {
      method: 'POST', headers: authHeaders(), signal: ac.signal,
      body: JSON.stringify({ messages: [{ role: 'user', content: `story ${i}` }], stream: true, max_tokens: 1500,
        logit_bias: NO_EOG }),
    });
    const reader = res.body.getReader();
    first.push(reader.read().then((r) => !r.done));
  }
  const gotFirst = (await Promise.all(first)).every(Boolean);
  const busy = await waitBusy(slots, 5000);
  check(gotFirst && busy === slots, 'disconnect: all slots streaming', `first chunks ${gotFirst}, busy ${busy}/${slots}`);
  const t0 = Date.now();
  for (const ac of aborts) ac.abort();
  const after = await waitBusy(0, 3000);
  const ms = Date.now() - t0;
  check(after === 0, 'disconnect: aborted streams free their slots', `busy ${after} after ${ms} ms`);
  console.log(`disconnect: ${slots} slots freed ${ms} ms after the clients aborted`);
  const t1 = Date.now();
  const r = await post('/v1/completions', { prompt: 'next', max_tokens: 2 });
  check(r.status === 200 && Date.now() - t1 < 10000, 'disconnect: the next request is served at once',
    `status ${r.status} after ${Date.now() - t1} ms`);

  // non-streamed: the client gives up while the server is generating
  const ac = new AbortController();
  const p = fetch(BASE + '/v1/completions', {
    method: 'POST', headers: authHeaders(), signal: ac.signal,
    body: JSON.stringify({ prompt: 'a long one', max_tokens: 1500, logit_bias: NO_EOG }),
  }).catch(() => null);
  const b1 = await waitBusy(1, 5000);
  ac.abort();
  await p;
  const b2 = await waitBusy(0, 3000);
  check(b1 === 1 && b2 === 0, 'disconnect: an abandoned non-streamed request frees its slot', `busy ${b1} -> ${b2}`);
  const h = await health();
  check(h.queue.waiting === 0, 'disconnect: nothing left waiting', JSON.stringify(h.queue));
}

main().catch((e) => notOk('disconnect', e.stack || String(e)));
