// The composer: sending (with the outbox that resends after a reconnect), the draft and typing,
// editing an own message, and the reply being written.

import { conn, request, sendFrame } from './connection.js';
import { replaceWindow } from './conversation.js';
import { editSaved, onMessage } from './dispatch.js';
import { announce, ui } from './dom.js';
import { noteSent, sendGate } from './groupadmin.js';
import { clearTray, noticeUploadsBusy, readyFiles } from './files.js';
import { closeMenus, msgMenuFor, showNotice } from './menus.js';
import { quoteOf, renderMessages } from './messages.js';
import { failureText } from './names.js';
import { refreshReceiptsSoon } from './reads.js';
import {
  MAX_BODY_BYTES, PENDING_KEY, RESEND_MAX_TRIES, SEND_TIMEOUT_MS, TYPING_SEND_EVERY_MS, me,
  openConv, openWindow, shown, store, uuid
} from './state.js';

// ---- Sending ---------------------------------------------------------------------------------

// pending holds this page's sends the server has not confirmed yet (clientMsgId -> send): the
// page's own, not the store's, until the ack or the push of the stored message turns one into a
// message of the store (confirmSend).
export const pending = new Map();

export function restorePending() {
  pending.clear();
  let saved = [];
  try { saved = JSON.parse(localStorage.getItem(PENDING_KEY + me())) || []; } catch { saved = []; }
  for (const p of saved) {
    // Sent before the page was reloaded: maybe stored, maybe not. Retry reuses the id, so it is
    // stored once either way.
    pending.set(p.clientMsgId, { ...p, state: 'failed', retryable: true, error: 'Not confirmed.' });
  }
}

function savePending() {
  if (!store.auth) return;
  const list = [...pending.values()].map(({ clientMsgId, convId, body, createdAt, replyTo, attachments }) => ({ clientMsgId, convId, body, createdAt, replyTo, attachments }));
  if (list.length) localStorage.setItem(PENDING_KEY + me(), JSON.stringify(list));
  else localStorage.removeItem(PENDING_KEY + me());
}

export function submitMessage(ev) {
  ev.preventDefault();
  if (shown.editing && shown.editing.convId === shown.openId) { saveEdit(); return; }
  const c = openConv();
  const body = ui.input.value;
  const files = c ? readyFiles(c.id) : { busy: false, files: [] };
  if (files.busy) { noticeUploadsBusy(); return; }
  if (!c || (!body.trim() && !files.files.length) || !checkDraft() || sendGate(c)) return; // too long, or the group's settings: the text stays
  ui.input.value = '';
  autosize();
  checkDraft();
  const p = { clientMsgId: uuid(), convId: c.id, body, createdAt: new Date().toISOString(), state: 'sending' };
  if (files.files.length) { p.attachments = files.files; clearTray(c.id); }
  const replyTo = shown.replyTo.get(c.id);
  if (replyTo) p.replyTo = replyTo; // the pending message keeps it: a failed send is retried as the same reply
  shown.replyTo.delete(c.id);
  renderReplyBar();
  pending.set(p.clientMsgId, p);
  savePending();
  const w = openWindow();
  if (w && w.hasAfter) replaceWindow(c.id, {}, { bottom: true }); // show the newest, where the message goes
  else renderMessages({ bottom: true });
  if (outbox.draining) p.state = 'queued'; // behind the resends, to keep the order it was written in
  else attemptSend(p);
  drainOutbox();
}

// checkDraft counts the draft the way the server does (UTF-8 bytes, protocol.MaxBodyBytes) and,
// when it is over, says so and disables Send; the text is kept for the user to shorten. It
// reports whether the draft fits.
function checkDraft() {
  const bytes = new TextEncoder().encode(ui.input.value).length;
  const over = bytes > MAX_BODY_BYTES;
  const text = over ? `Too long to send: ${bytes.toLocaleString('en-US')} bytes, at most ${MAX_BODY_BYTES.toLocaleString('en-US')}. Shorten it by ${(bytes - MAX_BODY_BYTES).toLocaleString('en-US')} to send.` : '';
  if (ui.warning.textContent !== text) ui.warning.textContent = text;
  ui.warning.hidden = !over;
  ui.send.disabled = over;
  if (over) ui.input.setAttribute('aria-invalid', 'true');
  else ui.input.removeAttribute('aria-invalid');
  return !over;
}

// The outbox resends, after every reconnect, the messages whose send failed in a way a retry
// can mend (offline, connection lost, timeout, unavailable), one at a time in the order they were
// written, each with its own clientMsgId, so the server stores each once and in that order.
const outbox = { draining: false };

export function resendFailed() {
  let any = false;
  for (const p of pending.values()) {
    if (p.state === 'failed' && p.retryable) { p.state = 'queued'; p.tries = 0; any = true; }
  }
  if (!any) return;
  if (shown.openId) renderMessages();
  drainOutbox();
}

async function drainOutbox() {
  if (outbox.draining) return;
  outbox.draining = true;
  try {
    for (;;) {
      const p = [...pending.values()].find((x) => x.state === 'queued');
      if (!p) break;
      const err = await attemptSend(p);
      if (!err || !pending.has(p.clientMsgId)) continue;
      p.tries = (p.tries || 0) + 1;
      if (err.code === 'rate_limited' && conn.live && p.tries < RESEND_MAX_TRIES) {
        p.state = 'queued';
        await new Promise((r) => { setTimeout(r, Math.max(err.retryAfterMs, 50)); });
        continue;
      }
      // The rest waits for the next reconnect (or a Retry), still behind this one.
      for (const q of pending.values()) {
        if (q.state === 'queued') { q.state = 'failed'; q.retryable = true; q.error = 'Not sent yet.'; }
      }
      if (shown.openId) renderMessages();
      break;
    }
  } finally {
    outbox.draining = false;
  }
}

// attemptSend sends one pending message and resolves with null once it is stored, or with the
// error that left it failed.
export async function attemptSend(p) {
  p.state = 'sending';
  p.error = '';
  if (p.convId === shown.openId) renderMessages({ bottom: true });
  try {
    const frame = { type: 'send', conversationId: p.convId, clientMsgId: p.clientMsgId, body: p.body };
    if (p.replyTo) frame.replyTo = p.replyTo;
    if (p.attachments) frame.attachments = p.attachments.map((a) => a.id);
    const ack = await request(frame, SEND_TIMEOUT_MS);
    confirmSend(p.clientMsgId, ackedMessage(ack, p));
    noteSent(p.convId); // slow mode counts from here
    return null;
  } catch (err) {
    if (!pending.has(p.clientMsgId)) return null; // confirmed meanwhile by a replay or a late ack
    noteSent(p.convId, err); // a slow-mode refusal says how long to wait
    p.state = 'failed';
    p.retryable = err.retryable || ['offline', 'disconnected', 'timeout'].includes(err.code);
    // "disconnected" and "timeout" mean the frame went out: it may be stored, and Retry (same
    // clientMsgId) cannot store it twice.
    p.error = err.code === 'offline' ? 'Not sent: offline. It is sent when the connection is back.'
      : err.code === 'disconnected' ? 'Not confirmed: the connection was lost. It is sent again when it is back.'
        : err.code === 'timeout' ? 'Not confirmed in time.' : `Not sent: ${err.message || err.code}.`;
    if (p.convId === shown.openId) renderMessages();
    return err;
  }
}

export function ackedMessage(ack, p = pending.get(ack.clientMsgId)) {
  if (!p) return null;
  return {
    conversationId: ack.conversationId || p.convId, seq: ack.seq, senderId: me(), kind: 'text',
    body: p.body, createdAt: ack.createdAt || p.createdAt, clientMsgId: p.clientMsgId, replyTo: p.replyTo,
    attachments: p.attachments,
  };
}

// confirmSend turns a pending message into the stored one: by its ack, or by the push or page
// that carries its clientMsgId, whichever comes first.
export function confirmSend(clientMsgId, m) {
  if (!m || !pending.has(clientMsgId)) return;
  pending.delete(clientMsgId);
  savePending();
  onMessage(m);
  const c = store.convs.get(m.conversationId);
  if (c && c.kind === 'group' && c.id === shown.openId) refreshReceiptsSoon();
}

export function confirmFromHistory(m) {
  if (m.senderId === me() && m.clientMsgId && pending.has(m.clientMsgId)) {
    pending.delete(m.clientMsgId);
    savePending();
  }
}

export function discardPending(p) {
  pending.delete(p.clientMsgId);
  savePending();
  renderMessages();
}

// ---- Composer and typing ---------------------------------------------------------------------

const typingSent = new Map(); // conversation id -> when a typing frame was last sent
export function onInput() {
  autosize();
  checkDraft();
  const c = openConv();
  if (!c || !ui.input.value.trim()) return;
  // Editing an old message is not writing a new one: the others are not told "typing".
  if (shown.editing && shown.editing.convId === c.id) return;
  const last = typingSent.get(c.id) || 0;
  if (Date.now() - last < TYPING_SEND_EVERY_MS) return;
  if (sendFrame({ type: 'typing', conversationId: c.id })) typingSent.set(c.id, Date.now());
}

function autosize() {
  ui.input.style.height = 'auto';
  ui.input.style.height = `${Math.min(ui.input.scrollHeight, 160)}px`;
}

// ---- Editing --------------------------------------------------------------------------------

// startEdit puts an own message's text in the composer; Enter saves it, Escape gives the
// composer back the draft it held.
export function startEdit() {
  const { convId, seq } = msgMenuFor;
  closeMenus();
  const w = store.windows.get(convId);
  const m = w && w.bySeq.get(seq);
  if (convId !== shown.openId || !m || m.kind !== 'text' || m.senderId !== me()) return;
  const draft = shown.editing ? shown.editing.draft : ui.input.value;
  shown.editing = { convId, seq, draft };
  ui.input.value = m.body || '';
  renderEditBar();
  ui.input.focus();
  ui.input.setSelectionRange(ui.input.value.length, ui.input.value.length);
}

export function cancelEdit({ focus = true } = {}) {
  if (!shown.editing) return;
  ui.input.value = shown.editing.draft;
  shown.editing = null;
  renderEditBar();
  if (focus) ui.input.focus();
}

export function renderEditBar() {
  const editing = !!shown.editing && shown.editing.convId === shown.openId;
  ui.editBar.hidden = !editing;
  ui.editBar.dataset.seq = editing ? String(shown.editing.seq) : '';
  ui.send.textContent = editing ? 'Save' : 'Send';
  autosize();
  checkDraft();
}

// saveEdit sends the composer's text as the new text of the message being edited. The page
// shows it at once; the edited frame that follows brings its version and time. A refusal (the
// message was deleted meanwhile, a limit) is told in the server's words, and the text stays.
async function saveEdit() {
  const { convId, seq } = shown.editing;
  const body = ui.input.value;
  const w = store.windows.get(convId);
  const m = w && w.bySeq.get(seq);
  if (m && m.body === body) { cancelEdit(); return; }
  if (!body.trim() || !checkDraft()) return;
  ui.send.disabled = true;
  try {
    await request({ type: 'edit_message', conversationId: convId, seq, body });
  } catch (err) {
    showNotice(failureText('Could not edit the message', err));
    return;
  } finally {
    ui.send.disabled = false;
    checkDraft();
  }
  if (shown.editing && shown.editing.convId === convId && shown.editing.seq === seq) cancelEdit();
  editSaved(convId, seq, body);
  announce('Message edited');
}

export function startReply() {
  const { convId, seq } = msgMenuFor;
  closeMenus();
  if (convId !== shown.openId) return;
  shown.replyTo.set(convId, seq);
  renderReplyBar();
  ui.input.focus();
}

export function cancelReply() {
  shown.replyTo.delete(shown.openId);
  renderReplyBar();
  ui.input.focus();
}

// renderReplyBar shows over the composer what the next send answers, with a button to cancel.
export function renderReplyBar() {
  const seq = shown.openId && shown.replyTo.get(shown.openId);
  const w = openWindow();
  ui.replyBar.hidden = !seq;
  if (!seq) return;
  const q = quoteOf(w, seq);
  ui.replySender.textContent = q.sender || '';
  ui.replyText.textContent = q.text;
  ui.replyBar.dataset.seq = String(seq);
}
