// The session: sign-in and sign-out, and what each new socket does first (hello, then sync).

import { pending, resendFailed, restorePending } from './composer.js';
import { conn, connect, disconnect, request, setStatus } from './connection.js';
import { loadOf, openConversation, resetFocus, sendFocus, showConversation } from './conversation.js';
import { noteMissed } from './dispatch-windows.js';
import {
  applyConversationList, clearStore, setAuth, setOwnName, syncCutShort, syncStarting
} from './dispatch.js';
import { ui } from './dom.js';
import { addFinder, addPicks, blockFinder, dmFinder, groupFinder, groupPicks } from './finder.js';
import { checkJoinLink } from './groupadmin.js';
import { requestGroupPresence, requestPresence } from './groupinfo.js';
import { renderConvList, updateTitle } from './list.js';
import { closeMenus, confirmAction, hideNotice } from './menus.js';
import { renderMessages } from './messages.js';
import { refreshNames } from './names.js';
import { closeNotification, notifications } from './notifications.js';
import {
  flushDelivered, flushRead, markVisibleRead, reads, refreshReceipts, resendSavedReads
} from './reads.js';
import { loadBlocks } from './settings.js';
import { AUTH_KEY, PENDING_KEY, READS_KEY, me, openWindow, shown, store } from './state.js';

// ---- Sign-in ---------------------------------------------------------------------------------

export function loadAuth() {
  try {
    const a = JSON.parse(localStorage.getItem(AUTH_KEY));
    if (a && typeof a.token === 'string' && typeof a.userId === 'string') return a;
  } catch { /* a corrupt entry is the same as none */ }
  return null;
}

export async function signIn(ev) {
  ev.preventDefault();
  const name = ui.loginName.value.trim();
  ui.loginError.textContent = '';
  ui.loginSubmit.disabled = true;
  try {
    const resp = await fetch('/api/login', {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ name }),
    });
    const body = await resp.json().catch(() => ({}));
    if (!resp.ok) throw new Error(body.error || `sign-in failed (${resp.status})`);
    setAuth({ token: body.token, userId: body.userId, name: body.name });
    start();
  } catch (err) {
    ui.loginError.textContent = err.message === 'Failed to fetch' ? 'The server cannot be reached.' : err.message;
  } finally {
    ui.loginSubmit.disabled = false;
  }
}

export function showLogin(message) {
  ui.chatView.hidden = true;
  ui.loginView.hidden = false;
  ui.loginError.textContent = message || '';
  document.title = 'chatd';
  ui.loginName.focus();
}

export function signOut(message) {
  flushRead();
  if (store.auth) {
    localStorage.removeItem(PENDING_KEY + me());
    localStorage.removeItem(READS_KEY + me());
  }
  clearStore();
  disconnect();
  closeMenus();
  for (const d of [ui.confirm, ui.groupInfo, ui.settings, ui.jumpPicker]) if (d.open) d.close();
  hideNotice();
  pending.clear();
  shown.replyTo.clear();
  for (const f of [dmFinder, groupFinder, addFinder, blockFinder]) f.close();
  groupPicks.clear();
  addPicks.clear();
  shown.editing = null;
  shown.openId = null;
  for (const id of [...notifications.keys()]) closeNotification(id);
  updateTitle();
  ui.convList.replaceChildren();
  ui.list.replaceChildren();
  history.replaceState(null, '', location.pathname);
  showLogin(message);
}

export function start() {
  ui.loginView.hidden = true;
  ui.chatView.hidden = false;
  ui.me.textContent = store.auth.name || store.auth.userId;
  restorePending();
  showConversation();
  renderConvList();
  connect();
}

export function onHello(f) {
  if (f.userId && f.userId !== me()) { signOut('Signed in as another user; please sign in again.'); return; }
  if (f.name) { setOwnName(f.name); ui.me.textContent = f.name; }
  conn.attempt = 0;
  conn.live = true;
  resetFocus(); // a new socket shows nothing
  reads.sent.clear(); // the sync reply carries the server's read positions
  setStatus('syncing', 'Syncing…');
  syncAll();
}

// syncAll names, per conversation whose window reaches the newest message, the highest seq held;
// the server replays what came after (up to its limit) and answers with the conversation list.
async function syncAll() {
  const since = {};
  const versions = {};
  for (const [id, w] of store.windows) {
    if (!w.hasAfter) since[id] = w.hi;
    // The changes (edits, reactions, deletions) made while this page was away, of the messages
    // it holds, come as changes frames before the reply.
    const c = store.convs.get(id);
    if (c) versions[id] = c.heldVersion;
  }
  let reply;
  syncStarting();
  try {
    reply = await request({ type: 'sync', since, versions });
  } catch (err) {
    if (err.code !== 'disconnected' && conn.ws) conn.ws.close(1000, 'sync failed'); // start over
    return;
  }
  applyConversationList(reply.conversations || [], { synced: true });
  if (syncCutShort()) { syncAll(); return; } // a catch-up stopped at its limit: ask for the rest
  sendFocus(); // a new socket shows nothing until told
  flushDelivered();
  requestPresence();
  if (ui.groupInfo.open) requestGroupPresence();
  refreshNames();
  loadBlocks();
  resendSavedReads();
  setStatus('connected', 'Connected');
  resendFailed();
  noteMissed();
  if (!shown.openId) {
    const wanted = hashConversation();
    if (wanted && store.convs.has(wanted)) openConversation(wanted);
  } else if (!store.windows.has(shown.openId)) {
    openConversation(shown.openId); // opened while offline: load it now
  } else if (store.convs.has(shown.openId)) {
    const w = openWindow();
    loadOf(w).retryAt = 0;
    renderMessages();
    refreshReceipts();
    markVisibleRead();
  }
  renderConvList();
  checkJoinLink(); // an invite link opened the page (#/join/<token>)
}

// hashConversation is the conversation remembered in the address (#c=<id>), so a reload reopens it.
function hashConversation() {
  try {
    return decodeURIComponent(location.hash.replace(/^#c=/, ''));
  } catch {
    return ''; // a hand-edited address
  }
}

// signOutHere forgets this device's sign-in; unsent messages would go with it, so it asks first.
export async function signOutHere() {
  const unsent = pending.size;
  if (unsent > 0) {
    const ok = await confirmAction({
      title: 'Sign out of this device?',
      text: `${unsent} message${unsent === 1 ? ' is' : 's are'} not sent yet and will be discarded.`,
      ok: 'Sign out',
    });
    if (!ok) return;
  }
  signOut();
}
