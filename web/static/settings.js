// The settings panel: your name, read receipts, presence, blocked users.

import { conn, request } from './connection.js';
import { showConversation } from './conversation.js';
import { applyBlockList, applyBlocked, setOwnName } from './dispatch.js';
import { announce, h, reconcile, ui } from './dom.js';
import { PICK_SOMEONE, blockFinder } from './finder.js';
import { failureText, nameOf, namesChanged } from './names.js';
import { notifyOn } from './notifications.js';
import { openPushSettings } from './push.js';
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
  openPushSettings();
  ui.nameInput.value = store.auth.name || '';
  ui.nameStatus.textContent = '';
  renderBlocks();
  ui.settings.showModal();
  ui.nameInput.focus();
  if (conn.live) loadBlocks();
}

export function setReceipts() {
  return savePrivacy({
    box: ui.receiptsSwitch, status: ui.receiptsStatus, field: 'hideReceipts', key: PRIVACY_KEY,
    shownText: 'Others see when you have read their messages.', hiddenText: 'Your read receipts are hidden.',
    failure: 'Could not change read receipts',
  });
}

export function setPresenceShown() {
  return savePrivacy({
    box: ui.presenceSwitch, status: ui.presenceStatus, field: 'hidePresence', key: PRESENCE_KEY,
    shownText: 'Others see when you are online.', hiddenText: 'Whether you are online is hidden.',
    failure: 'Could not change who sees you online',
  });
}

// savePrivacy sends one privacy switch (set_privacy with field) as the user set box, and remembers
// it on this device under key: the server has no frame that tells it. A refusal puts the switch
// back, since the server kept the old setting.
async function savePrivacy({ box, status, field, key, shownText, hiddenText, failure }) {
  const show = box.checked;
  box.disabled = true;
  status.textContent = 'Saving…';
  try {
    await request({ type: 'set_privacy', [field]: !show });
    localStorage.setItem(key + me(), show ? 'shown' : 'hidden');
    status.textContent = show ? shownText : hiddenText;
  } catch (err) {
    box.checked = !show;
    status.textContent = '';
    ui.settingsError.textContent = failureText(failure, err);
  } finally {
    box.disabled = false;
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
