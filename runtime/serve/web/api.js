// The daemon's HTTP API as the page uses it: JSON calls with a deadline and
// the run event stream (Server-Sent Events read over fetch, so a bearer token
// can ride along and the stream can stop for good after `run_finished`;
// reconnects resume with Last-Event-ID like EventSource does).

const TOKEN_KEY = 'agentrt.token';
const CALL_TIMEOUT_MS = 15000;

export class ApiFailure extends Error {
  constructor(status, body, path) {
    const what = body && body.error ? `${body.error}: ${body.message}` : `HTTP ${status}`;
    const where = body && body.where ? ` (at ${body.where})` : '';
    super(`${what}${where} — ${path}`);
    this.status = status;
    this.body = body;
  }
}

export function getToken() {
  try {
    return localStorage.getItem(TOKEN_KEY) || '';
  } catch {
    return '';
  }
}

export function setToken(value) {
  try {
    if (value) localStorage.setItem(TOKEN_KEY, value);
    else localStorage.removeItem(TOKEN_KEY);
  } catch {
    // storage disabled: the token lasts as long as this page
  }
  memoryToken = value;
}

let memoryToken = '';

function authHeaders() {
  const token = getToken() || memoryToken;
  return token ? { Authorization: `Bearer ${token}` } : {};
}

const listeners = new Set();
/** Called with every ApiFailure of status 401, to ask for a token. */
export function onUnauthorized(fn) {
  listeners.add(fn);
}

async function readBody(resp) {
  const text = await resp.text();
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch {
    return { error: 'bad_response', message: text.slice(0, 200) };
  }
}

/** One JSON call; rejects with ApiFailure on a non-2xx answer. */
export async function api(path, { method = 'GET', body, timeoutMs = CALL_TIMEOUT_MS } = {}) {
  const headers = { Accept: 'application/json', ...authHeaders() };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const resp = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: 'no-store',
    signal: AbortSignal.timeout(timeoutMs),
  });
  const parsed = await readBody(resp);
  if (!resp.ok) {
    const failure = new ApiFailure(resp.status, parsed, path);
    if (resp.status === 401) for (const fn of listeners) fn(failure);
    throw failure;
  }
  return parsed;
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

/** Parse one SSE block ("id: 3\nevent: step\ndata: {...}") into its fields. */
function parseBlock(block) {
  const msg = { data: [] };
  for (const line of block.split('\n')) {
    if (!line || line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') msg.data.push(value);
    else if (field === 'id') msg.id = value;
    else if (field === 'event') msg.event = value;
  }
  return msg;
}

/**
 * Follow a run's events until `run_finished` (or until `signal` aborts).
 * onEvent(event) gets each decoded event; onState(state, detail) gets
 * 'connecting' | 'live' | 'reconnecting' | 'ended' | 'gone'.  When a stream
 * ends without `run_finished`, `isOver()` decides between stopping and
 * resuming after the last event id.
 */
export async function followEvents(path, { onEvent, onState, isOver, signal }) {
  let lastId = null;
  let delay = 500;
  while (!signal.aborted) {
    let finished = false;
    try {
      onState('connecting');
      const headers = { Accept: 'text/event-stream', ...authHeaders() };
      if (lastId !== null) headers['Last-Event-ID'] = lastId;
      const resp = await fetch(path, { headers, signal, cache: 'no-store' });
      if (resp.status === 404) {
        onState('gone', new ApiFailure(404, await readBody(resp), path));
        return;
      }
      if (!resp.ok) throw new ApiFailure(resp.status, await readBody(resp), path);
      onState('live');
      delay = 500;
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        // Normalise CRLF, but keep a trailing CR: its LF may be in the next chunk.
        const held = buf.endsWith('\r') ? '\r' : '';
        buf = (held ? buf.slice(0, -1) : buf).replace(/\r\n?/g, '\n');
        let cut;
        while ((cut = buf.indexOf('\n\n')) >= 0) {
          const msg = parseBlock(buf.slice(0, cut));
          buf = buf.slice(cut + 2);
          if (msg.id !== undefined) lastId = msg.id;
          if (!msg.data.length) continue;
          const event = JSON.parse(msg.data.join('\n'));
          onEvent(event);
          if (event.type === 'run_finished') finished = true;
        }
        buf += held;
      }
      if (finished || (await isOver())) {
        onState('ended');
        return;
      }
    } catch (err) {
      if (signal.aborted) return;
      onState('reconnecting', err);
    }
    await sleep(delay, signal);
    delay = Math.min(delay * 2, 5000);
  }
}
