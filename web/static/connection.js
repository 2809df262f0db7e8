// The connection: one WebSocket with its reconnects and heartbeat, and requests (a frame with an
// id, answered by the reply that echoes it).

import { handleFrame } from './dispatch.js';
import { ui } from './dom.js';
import { signOut } from './session.js';
import {
  BACKOFF_BASE_MS, BACKOFF_MAX_MS, HEARTBEAT_MS, PONG_TIMEOUT_MS, REQUEST_TIMEOUT_MS,
  TOKEN_CHECK_EVERY_MS, store
} from './state.js';

// ---- Connection ------------------------------------------------------------------------------

export const conn = {
  ws: null, opened: false, live: false, attempt: 0, timer: null, retryAt: 0, countdown: null,
  nextId: 1, waiting: new Map(), lastTokenCheck: 0, heartbeat: null,
};

class RequestError extends Error {
  constructor(code, message, retryable, retryAfterMs = 0) {
    super(message);
    this.code = code;
    this.retryable = retryable;
    this.retryAfterMs = retryAfterMs;
  }
}

export function setStatus(kind, text) {
  ui.status.dataset.state = kind;
  ui.status.textContent = text;
  ui.reconnectNow.hidden = kind !== 'offline';
}

export function connect() {
  clearTimeout(conn.timer);
  clearInterval(conn.countdown);
  conn.timer = null;
  if (!store.auth || conn.ws) return;
  const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
  // The token travels as a subprotocol, not in the URL: browsers print a failed WebSocket's URL
  // in the console. The server answers 'chatd'.
  const sock = new WebSocket(`${scheme}//${location.host}/ws`, ['chatd', `chatd.token.${store.auth.token}`]);
  conn.ws = sock;
  conn.opened = false;
  setStatus('connecting', conn.attempt ? 'Reconnecting…' : 'Connecting…');
  sock.onopen = () => {
    if (conn.ws !== sock) return;
    conn.opened = true;
    clearInterval(conn.heartbeat);
    conn.heartbeat = setInterval(() => {
      if (conn.ws !== sock) return;
      request({ type: 'ping' }, PONG_TIMEOUT_MS).catch(() => {
        if (conn.ws === sock) sock.close(4000, 'no pong'); // onclose reconnects
      });
    }, HEARTBEAT_MS);
  };
  sock.onmessage = (ev) => {
    if (conn.ws !== sock) return;
    let f;
    try { f = JSON.parse(ev.data); } catch { return; }
    handleFrame(f);
  };
  sock.onclose = (ev) => { if (conn.ws === sock) disconnected(ev); };
}

export function disconnect() {
  const sock = conn.ws;
  conn.ws = null;
  conn.live = false;
  clearInterval(conn.heartbeat);
  clearTimeout(conn.timer);
  clearInterval(conn.countdown);
  if (sock) sock.close(1000, 'signed out');
  failWaiting();
}

function disconnected(ev) {
  const opened = conn.opened;
  conn.ws = null;
  conn.live = false;
  clearInterval(conn.heartbeat);
  failWaiting();
  if (!store.auth) return;
  if (ev.code === 4003) { signOut('You were signed out by the server.'); return; }
  if (!opened) checkToken();
  scheduleReconnect(ev.code === 4029 ? BACKOFF_MAX_MS : 0);
}

// scheduleReconnect waits an exponentially growing delay with "equal jitter" (half fixed, half
// random), so a fleet of pages that lost the same server does not come back in one burst.
function scheduleReconnect(minDelay) {
  const ceiling = Math.min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** conn.attempt);
  const delay = Math.max(minDelay, ceiling / 2 + Math.random() * ceiling / 2);
  conn.attempt++;
  conn.retryAt = Date.now() + delay;
  conn.timer = setTimeout(connect, delay);
  const tick = () => {
    const s = Math.max(0, Math.ceil((conn.retryAt - Date.now()) / 1000));
    setStatus('offline', `Offline, retrying in ${s} s`);
  };
  tick();
  clearInterval(conn.countdown);
  conn.countdown = setInterval(tick, 1000);
}

// checkToken finds out whether a refused WebSocket was refused for the token (browsers hide the
// HTTP status of a failed upgrade); a 401 from the badge endpoint means sign in again.
async function checkToken() {
  if (Date.now() - conn.lastTokenCheck < TOKEN_CHECK_EVERY_MS || !store.auth) return;
  conn.lastTokenCheck = Date.now();
  try {
    const resp = await fetch('/api/badge', { headers: { Authorization: `Bearer ${store.auth.token}` } });
    if (resp.status === 401 && store.auth) signOut('Your session has expired. Please sign in again.');
  } catch { /* the server is down; the reconnect loop keeps trying */ }
}

export function sendFrame(frame) {
  if (!conn.ws || conn.ws.readyState !== WebSocket.OPEN) return false;
  conn.ws.send(JSON.stringify(frame));
  return true;
}

// request sends a frame with a fresh id and resolves with the reply that echoes it; an error
// frame, a timeout or a lost connection rejects with a RequestError.
export function request(frame, timeout = REQUEST_TIMEOUT_MS) {
  return new Promise((resolve, reject) => {
    const id = `r${conn.nextId++}`;
    if (!sendFrame({ ...frame, id })) {
      reject(new RequestError('offline', 'not connected', true));
      return;
    }
    const timer = setTimeout(() => {
      conn.waiting.delete(id);
      reject(new RequestError('timeout', 'no answer from the server', true));
    }, timeout);
    conn.waiting.set(id, { resolve, reject, timer });
  });
}

// settleReply hands a reply frame (one that echoes a request's id) to the request waiting for
// it, and reports whether it was one; everything else is for the dispatcher.
export function settleReply(f) {
  const w = f.id && conn.waiting.get(f.id);
  if (!w) return false;
  conn.waiting.delete(f.id);
  clearTimeout(w.timer);
  if (f.type === 'error') w.reject(new RequestError(f.code, f.message, !!f.retryable, f.retryAfterMs || 0));
  else w.resolve(f);
  return true;
}

function failWaiting() {
  const waiting = [...conn.waiting.values()];
  conn.waiting.clear();
  for (const w of waiting) {
    clearTimeout(w.timer);
    w.reject(new RequestError('disconnected', 'the connection was lost', true));
  }
}
