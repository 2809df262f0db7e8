// Read cursors (what the user has had on screen), receipts (who read own messages) and delivered
// positions.

import { conn, request, sendFrame } from './connection.js';
import { applyGroupReads, applyLastReceipts, applyOwnRead, applyReceipts, recountTotal } from './dispatch.js';
import { ui } from './dom.js';
import { firstOwnSeq, lastOwnSeq, renderMessages, updateCue } from './messages.js';
import {
  DELIVERED_DEBOUNCE_MS, READS_KEY, READ_DEBOUNCE_MS, me, openConv, openWindow, shown, store
} from './state.js';

// ---- Read cursors and receipts ---------------------------------------------------------------

export const reads = { convId: null, seq: 0, timer: null, sent: new Map() };

// What is on screen: the browser tells an IntersectionObserver which message elements of the open
// conversation are in the pane (more than the bottom 8 px) at each frame it draws. Only these
// count as read, so messages scrolled past by the page itself, or laid out below the fold, stay
// unread until the user has had them in view.
const onScreen = new Set(); // message elements in view now
const observed = new Set();
const screenObserver = new IntersectionObserver((entries) => {
  for (const en of entries) {
    if (en.isIntersecting) onScreen.add(en.target);
    else onScreen.delete(en.target);
  }
  markVisibleRead();
  updateCue();
}, { root: ui.scroller, rootMargin: '0px 0px -8px 0px' });

// observeMessages watches the message elements a render added and forgets those it removed.
export function observeMessages() {
  for (const e of observed) {
    if (e.parentNode === ui.list) continue;
    screenObserver.unobserve(e);
    observed.delete(e);
    onScreen.delete(e);
  }
  for (const e of ui.list.children) {
    if (e.dataset.seq && !observed.has(e)) {
      observed.add(e);
      screenObserver.observe(e);
    }
  }
}

function newestOnScreen() {
  let seq = 0;
  for (const e of onScreen) if (e.parentNode === ui.list) seq = Math.max(seq, Number(e.dataset.seq));
  return seq;
}

// seenSeq is the newest message of c the user has read or has on screen.
export function seenSeq(c) {
  let seq = Math.max(c.readSeq, reads.sent.get(c.id) || 0, reads.convId === c.id ? reads.seq : 0);
  if (c.id === shown.openId && document.visibilityState === 'visible') seq = Math.max(seq, newestOnScreen());
  return seq;
}

// markVisibleRead moves the read cursor to the newest message the user has on screen, if the
// page is visible; the frame is sent after READ_DEBOUNCE_MS, or at once when the page is hidden.
export function markVisibleRead() {
  const c = openConv();
  if (!c || document.visibilityState !== 'visible' || ui.convBody.hidden) return;
  const seq = newestOnScreen();
  if (seq <= Math.max(c.readSeq, reads.sent.get(c.id) || 0)) return;
  if (reads.convId && reads.convId !== c.id) flushRead();
  reads.convId = c.id;
  reads.seq = Math.max(reads.seq, seq);
  ui.list.dataset.unsentRead = String(reads.seq); // what the debounce holds back, for tests and tools
  if (!reads.timer) reads.timer = setTimeout(flushRead, READ_DEBOUNCE_MS);
}

export function flushRead() {
  clearTimeout(reads.timer);
  reads.timer = null;
  if (!reads.convId) return;
  if (sendFrame({ type: 'read', conversationId: reads.convId, seq: reads.seq })) {
    reads.sent.set(reads.convId, reads.seq);
    reads.convId = null;
    ui.list.dataset.sentRead = String(reads.seq);
    reads.seq = 0;
    delete ui.list.dataset.unsentRead;
  } // not connected: kept, and sent again once the user sees the messages after the sync
}

// flushReadUnloading sends the pending read cursor as the page goes away, and also keeps it in
// localStorage: a frame sent during unload can be lost, and the next page load sends it again.
export function flushReadUnloading() {
  if (!store.auth) return;
  const saved = savedReads();
  const keep = (id, seq) => { if (id && seq) saved[id] = Math.max(saved[id] || 0, seq); };
  keep(reads.convId, reads.seq);
  for (const [id, seq] of reads.sent) keep(id, seq);
  localStorage.setItem(READS_KEY + me(), JSON.stringify(saved));
  flushRead();
  // A beacon outlives the page, unlike a frame queued on a socket that is being torn down.
  const url = `/api/read?token=${encodeURIComponent(store.auth.token)}`;
  for (const [conversationId, seq] of Object.entries(saved)) {
    navigator.sendBeacon(url, JSON.stringify({ conversationId, seq }));
  }
}

function savedReads() {
  try { return JSON.parse(localStorage.getItem(READS_KEY + me())) || {}; } catch { return {}; }
}

// resendSavedReads runs after a sync: a saved cursor ahead of the server's is applied here at once
// and sent again; the server answers with the badge.
export function resendSavedReads() {
  const saved = savedReads();
  localStorage.removeItem(READS_KEY + me());
  for (const [id, seq] of Object.entries(saved)) {
    const c = store.convs.get(id);
    if (!c || seq <= c.readSeq) continue;
    if (!sendFrame({ type: 'read', conversationId: id, seq })) continue;
    applyOwnRead(c, Math.min(seq, c.lastSeq));
  }
  recountTotal();
}

let receiptsTimer = null;
export function refreshReceiptsSoon() {
  clearTimeout(receiptsTimer);
  receiptsTimer = setTimeout(refreshReceipts, 300);
}

// refreshReceipts asks who read an own message of the open conversation. In a DM it is the oldest
// one not known to be read: the peer is listed, with their read position, when they have read it,
// and that position gives the ticks of every own message, also of those loaded later (after a
// reload the page knows no receipt pushes). In a group it is the oldest own message shown: its
// readers' positions give every later own message its count (see groupReadBy).
export async function refreshReceipts() {
  const c = openConv();
  const w = openWindow();
  if (!c || !w || !conn.live) return;
  if (c.kind !== 'dm') { await refreshGroupReads(c, w); return; }
  const seq = firstOwnSeq(w, c.peerReadSeq + 1); // the oldest own message not known to be read
  if (!seq) return;
  try {
    const r = await request({ type: 'receipts', conversationId: c.id, seq });
    applyReceipts(c, seq, r);
    // Delivered is a position too: when the newest own message has reached the other member's
    // devices, every older one has, so one more question gives every message's ticks.
    const last = lastOwnSeq(w);
    if (last > Math.max(c.peerReadSeq, c.peerDeliveredSeq)) {
      const r2 = await request({ type: 'receipts', conversationId: c.id, seq: last });
      applyLastReceipts(c, last, r2);
    }
    if (c.id === shown.openId) renderMessages();
  } catch { /* receipts are a nicety; the next receipt push asks again */ }
}

async function refreshGroupReads(c, w) {
  const from = firstOwnSeq(w);
  if (!from) return;
  try {
    const r = await request({ type: 'receipts', conversationId: c.id, seq: from });
    const g = { from, readers: null, counts: [[from, r.readBy || 0]] };
    if (r.readers || !r.readBy) {
      g.readers = new Map((r.readers || []).filter((rd) => rd.userId !== me()).map((rd) => [rd.userId, rd.readSeq]));
    } else {
      // A large group lists no readers: the newest own message gets its own count.
      const last = lastOwnSeq(w);
      if (last > from) {
        const r2 = await request({ type: 'receipts', conversationId: c.id, seq: last });
        g.counts.push([last, r2.readBy || 0]); // after from's: counts stay in seq order
      }
    }
    applyGroupReads(c, g);
    if (c.id === shown.openId) renderMessages();
  } catch { /* receipts are a nicety; the next receipt push asks again */ }
}

// ---- Delivered positions ---------------------------------------------------------------------

// The page tells the server, per conversation, the highest seq it has received (pushes, sync
// replays, pages), so a sender sees ✓✓ "delivered"; coalesced like the read cursor.
const delivery = { hi: new Map(), sent: new Map(), timer: null };

export function noteReceived(convId, seq) {
  if (seq <= (delivery.hi.get(convId) || 0)) return;
  delivery.hi.set(convId, seq);
  if (!delivery.timer) delivery.timer = setTimeout(flushDelivered, DELIVERED_DEBOUNCE_MS);
}

export function flushDelivered() {
  clearTimeout(delivery.timer);
  delivery.timer = null;
  for (const [id, seq] of delivery.hi) {
    if (seq <= (delivery.sent.get(id) || 0)) continue;
    // Not connected: kept, and sent after the next sync.
    if (sendFrame({ type: 'delivered', conversationId: id, seq })) delivery.sent.set(id, seq);
  }
}
