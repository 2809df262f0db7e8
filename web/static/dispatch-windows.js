// The frame dispatcher's other half (see dispatch.js): the store's message windows. History
// replies and live messages are put into them here, and nowhere else.

import { confirmFromHistory } from './composer.js';
import { loadNewer, nearBottom } from './conversation.js';
import { notePreview, rememberGone } from './dispatch.js';
import { renderConvList } from './list.js';
import { noteReceived } from './reads.js';
import { MAX_WINDOW, PAGE_SIZE, shown, store } from './state.js';

// ---- Message windows -------------------------------------------------------------------------

// A window holds the messages lo..hi of one conversation with no gap. Seqs are gapless on the
// server (deleted messages stay as tombstones), so lo > firstSeq means there is more above and
// hi < lastSeq means there is more below.
function newWindow(lo, hi) {
  return { lo, hi, bySeq: new Map(), hasBefore: false, hasAfter: false };
}

function windowFromPage(c, page) {
  const msgs = page.messages;
  const w = msgs.length ? newWindow(msgs[0].seq, msgs[0].seq - 1) : newWindow(c.lastSeq + 1, c.lastSeq);
  for (const m of msgs) {
    if (m.seq !== w.hi + 1) break; // never hold a gap
    w.bySeq.set(m.seq, m);
    w.hi = m.seq;
  }
  setEnds(c, w);
  return w;
}

function setEnds(c, w) {
  w.hasBefore = w.lo > c.firstSeq;
  w.hasAfter = w.hi < c.lastSeq;
}

// noteMissed, after a sync, marks the windows whose conversation went on past them: more than
// the replay limit was missed.
export function noteMissed() {
  for (const [id, w] of store.windows) {
    const c = store.convs.get(id);
    if (c && c.lastSeq > w.hi) w.hasAfter = true;
  }
}

// applyHistory keeps what a history reply says of its conversation (where it starts and ends,
// sends it confirms, tombstones, the newest message) and returns its page.
export function applyHistory(convId, r) {
  const page = { messages: r.messages || [], lastSeq: r.lastSeq || 0 };
  const c = store.convs.get(convId);
  if (c) {
    c.lastSeq = Math.max(c.lastSeq, page.lastSeq);
    // firstSeq is 0 when nothing is visible: everything up to lastSeq was deleted for this user.
    c.firstSeq = r.firstSeq || page.lastSeq + 1;
  }
  for (const m of page.messages) {
    confirmFromHistory(m);
    rememberGone(c, m);
    if (m.kind === 'deleted' && c) c.deletedSeqs.add(m.seq);
  }
  if (page.messages.length) {
    const newest = page.messages[page.messages.length - 1];
    noteReceived(convId, newest.seq);
    if (c && c.last && newest.seq > c.last.seq) { notePreview(c, newest); renderConvList(); }
  }
  return page;
}

// buffers holds, per conversation whose window is being loaded, the live messages that arrived
// meanwhile (bufferLive to endBuffer), for installWindow to apply.
const buffers = new Map();

export function bufferLive(convId) {
  const buffered = [];
  buffers.set(convId, buffered);
  return buffered;
}

export function endBuffer(convId, buffered) {
  if (buffers.get(convId) === buffered) buffers.delete(convId);
}

// installWindow makes a loaded page c's window, with the live messages buffered meanwhile.
export function installWindow(c, page, buffered) {
  const w = windowFromPage(c, page);
  for (const m of buffered) insertLive(w, m);
  store.windows.set(c.id, w);
  return w;
}

// addOlder puts a page of older messages above w (as far as they join it without a gap).
export function addOlder(c, w, page) {
  for (let i = page.messages.length - 1; i >= 0; i--) {
    const m = page.messages[i];
    if (m.seq !== w.lo - 1) break;
    w.bySeq.set(m.seq, m);
    w.lo = m.seq;
  }
  setEnds(c, w);
  if (w.hi - w.lo + 1 > MAX_WINDOW) trimBottom(w);
}

// addNewer puts a page of newer messages below w.
export function addNewer(c, w, page) {
  for (const m of page.messages) {
    if (m.seq !== w.hi + 1) continue;
    w.bySeq.set(m.seq, m);
    w.hi = m.seq;
  }
  setEnds(c, w);
  if (w.hi - w.lo + 1 > MAX_WINDOW) trimTop(w);
}

// deliver puts a live message into its conversation's window, or keeps it until the window that
// is being loaded arrives.
export function deliver(m) {
  const buf = buffers.get(m.conversationId);
  if (buf) buf.push(m);
  const w = store.windows.get(m.conversationId);
  if (w) insertLive(w, m);
}

function insertLive(w, m) {
  if (m.seq < w.lo) return;
  if (m.seq <= w.hi) { // a duplicate (replay, retry): same seq, same place, the newer state kept
    const held = w.bySeq.get(m.seq);
    if (!held || (m.version || 0) >= (held.version || 0)) w.bySeq.set(m.seq, { ...m, quote: m.quote || (held && held.quote) });
    return;
  }
  if (w.hasAfter) return; // the window is not at the newest messages; the cue offers them
  if (m.seq === w.hi + 1) {
    w.bySeq.set(m.seq, m);
    w.hi = m.seq;
    if (w.hi - w.lo + 1 > MAX_WINDOW + PAGE_SIZE && nearBottom()) trimTop(w);
    return;
  }
  w.hasAfter = true; // a gap: fetch it rather than show messages out of order
  if (store.windows.get(shown.openId) === w) loadNewer();
}

function trimTop(w) {
  while (w.hi - w.lo + 1 > MAX_WINDOW) w.bySeq.delete(w.lo++);
  w.hasBefore = true;
}

function trimBottom(w) {
  while (w.hi - w.lo + 1 > MAX_WINDOW) w.bySeq.delete(w.hi--);
  w.hasAfter = true;
}
