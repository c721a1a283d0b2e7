// mpi_kill.mjs — a rank of the server's pipeline (DELTALLM_KILL_PID) killed while two requests generate, one
// streamed and one not: the stream ends with an error event that names the dead rank, the plain request
// gets an error response with the same line, both within seconds (no stall).
import { BASE, NO_EOG, authHeaders, check, notOk, readSSE } from './lib.mjs';

const pid = Number(process.env.DELTALLM_KILL_PID);

async function main() {
  const body = (stream) => JSON.stringify({ prompt: 'a very long story', max_tokens: 6000, stream, logit_bias: NO_EOG });
  const plain = fetch(BASE + '/v1/completions', { method: 'POST', headers: authHeaders(), body: body(false) })
    .then(async (r) => ({ status: r.status, text: await r.text() }))
    .catch((e) => ({ status: 0, text: String(e) }));
  const res = await fetch(BASE + '/v1/completions', { method: 'POST', headers: authHeaders(), body: body(true) });
  let chunks = 0, killedAt = 0, error = null, done = false;
  const t0 = Date.now();
  await readSSE(res, (ev) => {
    if (ev === '[DONE]') {
      done = true;
      return false;
    }
    if (ev.error) error = ev.error;
    else chunks++;
    if (chunks === 20 && !killedAt) {
      process.kill(pid, 'SIGKILL');
      killedAt = Date.now();
    }
    return true;
  });
  const ms = killedAt ? Date.now() - killedAt : -1;
  check(killedAt > 0, 'mpi_kill: rank killed while streaming', `${chunks} chunks, no kill`);
  check(error && /rank 1 \(pid \d+ on .*\) died/.test(error.message) && done,
    'mpi_kill: the stream ends with an error naming the rank', JSON.stringify(error));
  check(ms >= 0 && ms < 10000, 'mpi_kill: within seconds', `${ms} ms after the kill`);
  const p = await plain;
  check(p.status >= 500 && /died/.test(p.text), 'mpi_kill: the plain request gets an error response',
    `status ${p.status}: ${p.text.slice(0, 200)}`);
  console.log(`mpi_kill: ${chunks} chunks before the error; error ${ms} ms after the kill (${Date.now() - t0} ms in all): ${error && error.message}`);
}

main().catch((e) => notOk('mpi_kill', e.stack || String(e)));
