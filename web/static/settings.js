// The settings panel: your name, read receipts, presence, blocked users.

import { conn, request } from './connection.js';
import { showConversation } from './conversation.js';
import { applyBlockList, applyBlocked, setOwnName } from './dispatch.js';
import { announce, h, reconcile, ui } from './dom.js';
import { PICK_SOMEONE, blockFinder } from './finder.js';
import { failureText, nameOf, namesChanged } from './names.js';
import { notifyOn } from './notifications.js';
import { PRESENCE_KEY, PRIVACY_KEY, me, shown, store } from './state.js';

// ---- Your name ----------------------------------------------------------------------------

export async function saveName(ev) {
  ev.preventDefault();
  const name = ui.nameInput.value.trim().replace(/\s+/g, ' ');
  if (!name) return;
  ui.nameStatus.textContent = 'Saving…';
  try {
    await request({ type: 'set_name', name });
  } catch (err) {
    ui.nameStatus.textContent = failureText('Could not change your name', err); // the text is kept to correct
    return;
  }
  setOwnName(name); // the profile push that follows says the same
  ui.nameInput.value = name;
  ui.nameStatus.textContent = 'Saved. Others see your new name.';
  namesChanged();
}

// ---- Settings --------------------------------------------------------------------------------

// setBlocked blocks or unblocks a user; a refusal is told through report. It resolves true on
// success.
export async function setBlocked(userId, block, report) {
  try {
    await request({ type: block ? 'block_user' : 'unblock_user', userId });
  } catch (err) {
    report(failureText(block ? `Could not block ${nameOf(userId)}` : `Could not unblock ${nameOf(userId)}`, err));
    return false;
  }
  applyBlocked(userId, block);
  announce(block ? `${nameOf(userId)} is blocked` : `${nameOf(userId)} is unblocked`);
  renderBlocks();
  if (shown.openId) showConversation();
  return true;
}

// loadBlocks asks who this user blocks; a block made on another device shows after a reconnect.
export async function loadBlocks() {
  try {
    const r = await request({ type: 'list_blocks' });
    applyBlockList(r.userIds || []);
    renderBlocks();
    if (shown.openId) showConversation();
  } catch (err) {
    if (ui.settings.open) ui.settingsError.textContent = failureText('Could not load the blocked users', err);
  }
}

export function openSettings() {
  ui.settingsError.textContent = '';
  ui.receiptsSwitch.checked = localStorage.getItem(PRIVACY_KEY + me()) !== 'hidden';
  ui.receiptsStatus.textContent = '';
  ui.presenceSwitch.checked = localStorage.getItem(PRESENCE_KEY + me()) !== 'hidden';
  ui.presenceStatus.textContent = '';
  ui.notifySwitch.checked = notifyOn();
  ui.notifyStatus.textContent = '';
  ui.nameInput.value = store.auth.name || '';
  ui.nameStatus.textContent = '';
  renderBlocks();
  ui.settings.showModal();
  ui.nameInput.focus();
  if (conn.live) loadBlocks();
}

export async function setReceipts() {
  const send = ui.receiptsSwitch.checked;
  ui.receiptsSwitch.disabled = true;
  ui.receiptsStatus.textContent = 'Saving…';
  try {
    await request({ type: 'set_privacy', hideReceipts: !send });
    localStorage.setItem(PRIVACY_KEY + me(), send ? 'shown' : 'hidden');
    ui.receiptsStatus.textContent = send ? 'Others see when you have read their messages.' : 'Your read receipts are hidden.';
  } catch (err) {
    ui.receiptsSwitch.checked = !send; // the server kept the old setting
    ui.receiptsStatus.textContent = '';
    ui.settingsError.textContent = failureText('Could not change read receipts', err);
  } finally {
    ui.receiptsSwitch.disabled = false;
  }
}

export async function setPresenceShown() {
  const show = ui.presenceSwitch.checked;
  ui.presenceSwitch.disabled = true;
  ui.presenceStatus.textContent = 'Saving…';
  try {
    await request({ type: 'set_privacy', hidePresence: !show });
    localStorage.setItem(PRESENCE_KEY + me(), show ? 'shown' : 'hidden');
    ui.presenceStatus.textContent = show ? 'Others see when you are online.' : 'Whether you are online is hidden.';
  } catch (err) {
    ui.presenceSwitch.checked = !show; // the server kept the old setting
    ui.presenceStatus.textContent = '';
    ui.settingsError.textContent = failureText('Could not change who sees you online', err);
  } finally {
    ui.presenceSwitch.disabled = false;
  }
}

export function renderBlocks() {
  const ids = [...store.blocks].sort();
  ui.blockedEmpty.hidden = ids.length > 0;
  reconcile(ui.blockedList, ids.map((u) => ({
    key: u,
    sig: nameOf(u),
    build: () => h('li', { class: 'member', 'data-user': u },
      h('span', { class: 'member-name', dir: 'auto' }, nameOf(u)),
      h('button', { type: 'button', class: 'link unblock', 'aria-label': `Unblock ${nameOf(u)}`, onclick: () => unblockFromSettings(u) }, 'Unblock')),
  })));
}

async function unblockFromSettings(userId) {
  ui.settingsError.textContent = '';
  if (await setBlocked(userId, false, (t) => { ui.settingsError.textContent = t; })) ui.blockUser.focus();
}

export async function blockFromSettings(ev) {
  ev.preventDefault();
  if (!ui.blockUser.value.trim()) return;
  const userId = blockFinder.chosen();
  ui.settingsError.textContent = userId ? '' : PICK_SOMEONE;
  if (!userId) return;
  if (await setBlocked(userId, true, (t) => { ui.settingsError.textContent = t; })) { ui.blockUser.value = ''; blockFinder.close(); }
}
