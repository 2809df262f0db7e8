// The open conversation: loading its message windows, opening and closing it, its header.

import { cancelEdit, renderEditBar, renderReplyBar } from './composer.js';
import { conn, request } from './connection.js';
import {
  addNewer, addOlder, applyHistory, bufferLive, endBuffer, installWindow
} from './dispatch-windows.js';
import { ui } from './dom.js';
import { renderGroupState } from './groupadmin.js';
import { presenceText, requestPresence } from './groupinfo.js';
import { renderConvList, typers } from './list.js';
import { dmPeer } from './menus.js';
import { renderMessages } from './messages.js';
import { convTitle, errorText, nameOf } from './names.js';
import { closeNotification } from './notifications.js';
import { flushRead, refreshReceipts, refreshReceiptsSoon } from './reads.js';
import { EDGE_PX, PAGE_RETRY_MS, PAGE_SIZE, openConv, openWindow, shown, store } from './state.js';

export function renderTyping() {
  const c = openConv();
  const who = c ? typers(c) : [];
  ui.typing.textContent = who.length === 0 ? ''
    : who.length === 1 ? `${nameOf(who[0])} is typing…` : `${who.map(nameOf).join(', ')} are typing…`;
}

// ---- Message windows -------------------------------------------------------------------------

// The windows themselves (see newWindow) are the store's, written by the dispatcher; this module
// decides what to load and when, and hands each history reply to the dispatcher.

// loads is the loading bookkeeping of each window: a page being loaded, and after a failed one the
// time a scroll may try again. It is this module's, not the store's: no frame says it.
const loads = new WeakMap();
export function loadOf(w) {
  let l = loads.get(w);
  if (!l) { l = { loading: false, retryAt: 0 }; loads.set(w, l); }
  return l;
}

export async function fetchPage(convId, anchor) {
  const r = await request({ type: 'history', conversationId: convId, limit: PAGE_SIZE, ...anchor });
  return applyHistory(convId, r);
}

// replaceWindow loads a new window for the open conversation (latest page, or around a seq)
// and applies the live messages that arrived meanwhile.
export async function replaceWindow(convId, anchor, scroll) {
  const view = ++shown.view;
  const buffered = bufferLive(convId);
  ui.loading.hidden = false;
  let page;
  try {
    page = await fetchPage(convId, anchor);
  } catch (err) {
    if (view === shown.view) {
      ui.loading.hidden = true;
      ui.meta.textContent = `Could not load messages: ${errorText(err)}`;
    }
    return;
  } finally {
    endBuffer(convId, buffered);
  }
  const c = store.convs.get(convId);
  if (view !== shown.view || !c) return;
  installWindow(c, page, buffered);
  ui.loading.hidden = true;
  renderMessages(scroll);
  refreshReceipts();
}

async function loadOlder() {
  const w = openWindow();
  const l = w && loadOf(w);
  if (!w || l.loading || !w.hasBefore) return;
  l.loading = true;
  ui.loading.hidden = false;
  try {
    const page = await fetchPage(shown.openId, { before: w.lo });
    addOlder(store.convs.get(shown.openId), w, page);
  } catch {
    l.retryAt = Date.now() + PAGE_RETRY_MS; // still loadable; a later scroll or the sync retries
  }
  l.loading = false;
  ui.loading.hidden = true;
  if (openWindow() === w) {
    renderMessages();
    refreshReceiptsSoon(); // own messages of the new page need their ticks
  }
}

export async function loadNewer() {
  const w = openWindow();
  const l = w && loadOf(w);
  if (!w || l.loading || !w.hasAfter) return;
  l.loading = true;
  try {
    const page = await fetchPage(shown.openId, { after: w.hi });
    addNewer(store.convs.get(shown.openId), w, page);
  } catch {
    l.retryAt = Date.now() + PAGE_RETRY_MS;
  }
  l.loading = false;
  if (openWindow() === w) {
    renderMessages();
    refreshReceiptsSoon();
  }
}

export function maybeLoadMore() {
  const w = openWindow();
  if (!w || loadOf(w).loading || !conn.live || Date.now() < loadOf(w).retryAt) return;
  const sc = ui.scroller;
  if (sc.scrollTop < EDGE_PX && w.hasBefore) loadOlder();
  else if (sc.scrollHeight - sc.scrollTop - sc.clientHeight < EDGE_PX && w.hasAfter) loadNewer();
}

export function nearBottom() {
  const sc = ui.scroller;
  return sc.scrollHeight - sc.scrollTop - sc.clientHeight < 60;
}

// ---- Opening a conversation ------------------------------------------------------------------

export function openConversation(id, opts = {}) {
  const c = store.convs.get(id);
  if (!c) return;
  flushRead();
  if (shown.editing && shown.editing.convId !== id) cancelEdit({ focus: false });
  shown.openId = id;
  sendFocus();
  closeNotification(id);
  if (c.kind === 'dm') requestPresence();
  history.replaceState(null, '', `#c=${encodeURIComponent(id)}`);
  document.body.classList.add('show-conv');
  showConversation();
  renderConvList();
  ui.list.replaceChildren();
  shown.divider = c.unread > 0 ? { convId: id, afterSeq: c.readSeq } : null;
  const w = store.windows.get(id);
  if (c.unread > 0) {
    replaceWindow(id, { around: c.readSeq + 1 }, { toSeq: c.readSeq + 1, divider: true });
  } else if (w && !w.hasAfter) {
    shown.view++;
    renderMessages({ bottom: true });
    refreshReceipts();
  } else {
    replaceWindow(id, {}, { bottom: true });
  }
  if (opts.focus) ui.input.focus({ preventScroll: true });
}

export function closeConversation() {
  flushRead();
  cancelEdit({ focus: false });
  if (ui.jumpPicker.open) ui.jumpPicker.close();
  shown.openId = null;
  sendFocus();
  shown.view++;
  document.body.classList.remove('show-conv');
  history.replaceState(null, '', location.pathname);
  showConversation();
  renderConvList();
}

export function showConversation() {
  const c = openConv();
  ui.noConv.hidden = !!c;
  ui.convBody.hidden = !c;
  if (!c) return;
  ui.title.textContent = convTitle(c);
  const peer = dmPeer(c);
  const presence = c.kind === 'dm' ? presenceText(peer) : '';
  ui.meta.textContent = c.kind === 'group' ? `${c.members.length} members: ${c.members.map(nameOf).join(', ')}`
    : [store.blocks.has(peer) ? `Direct message · you blocked ${nameOf(peer)}` : 'Direct message', presence].filter(Boolean).join(' · ');
  ui.meta.dataset.presence = presence;
  renderReplyBar();
  renderEditBar();
  ui.scroller.setAttribute('aria-label', `Messages with ${convTitle(c)}`);
  renderTyping();
  renderGroupState();
}

export function jumpTo(seq) {
  const c = openConv();
  if (!c) return;
  replaceWindow(c.id, { around: seq }, { toSeq: seq, highlight: true });
}

// sendFocus tells the server which conversation this socket shows (or none): large groups push
// reactions only to sockets that have the conversation in focus.
let focusSent; // the conversation id last told, '' for none; undefined on a new socket
export const resetFocus = () => { focusSent = undefined; };
export function sendFocus() {
  const id = shown.openId || '';
  if (!conn.live || focusSent === id) return;
  focusSent = id;
  request(id ? { type: 'focus', conversationId: id } : { type: 'focus' }).catch(() => { focusSent = undefined; });
}
