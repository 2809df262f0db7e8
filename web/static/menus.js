// Notices and confirmations, and the menus: the message menu (reply, react, edit, delete) with
// its long-press, and the conversation menu (search, notify me for, delete for me, leave, block).

import { request } from './connection.js';
import { onDeleted, onHidden, removeConv } from './dispatch.js';
import { announce, ui } from './dom.js';
import { runsGroup } from './groupadmin.js';
import { jumpToMessage } from './messages.js';
import { convTitle, failureText, nameOf } from './names.js';
import { setBlocked } from './settings.js';
import {
  LONG_PRESS_MS, LONG_PRESS_SLOP_PX, me, openConv, openMenu, openWindow, shown, store
} from './state.js';

// ---- Notices and confirmations ---------------------------------------------------------------

// showNotice says, under the top bar, why something the user asked for did not happen. It stays
// until dismissed or replaced: a refusal that vanished by itself could go unread.
export function showNotice(text) {
  ui.noticeText.textContent = text;
  ui.notice.hidden = false;
}

export function hideNotice() {
  ui.notice.hidden = true;
  ui.noticeText.textContent = '';
}

// confirmAction asks before something that cannot be undone; it resolves true for the confirm
// button, false for Cancel, Escape or a click beside the dialog.
export function confirmAction({ title, text, ok }) {
  ui.confirmTitle.textContent = title;
  ui.confirmText.textContent = text;
  ui.confirmOk.textContent = ok;
  const opener = document.activeElement;
  return new Promise((resolve) => {
    const done = (yes) => {
      ui.confirmOk.onclick = null;
      ui.confirmCancel.onclick = null;
      ui.confirm.onclose = null;
      if (ui.confirm.open) ui.confirm.close();
      if (opener && opener.isConnected) opener.focus();
      resolve(yes);
    };
    ui.confirmOk.onclick = () => done(true);
    ui.confirmCancel.onclick = () => done(false);
    ui.confirm.onclose = () => done(false); // Escape
    ui.confirm.showModal();
    ui.confirmCancel.focus(); // the safe choice has the focus
  });
}

// ---- Menus -----------------------------------------------------------------------------------

// One menu is open at a time. It takes the focus, arrows move through its items, Escape (or Tab,
// or a click elsewhere) closes it, and the focus goes back to the button that opened it.
function showMenu(el, trigger) {
  closeMenus();
  openMenu.el = el;
  openMenu.trigger = trigger;
  el.hidden = false;
  if (trigger) trigger.setAttribute('aria-expanded', 'true');
  menuItems(el)[0]?.focus();
}

export function closeMenus({ restoreFocus = false } = {}) {
  const { el, trigger } = openMenu;
  if (!el) return;
  el.hidden = true;
  openMenu.el = null;
  openMenu.trigger = null;
  if (trigger) trigger.setAttribute('aria-expanded', 'false');
  if (restoreFocus && trigger && trigger.isConnected) trigger.focus();
}

const menuItems = (el) => [...el.querySelectorAll('[role^="menuitem"]')].filter((b) => !b.hidden);

export function onMenuKey(e) {
  const items = menuItems(e.currentTarget);
  const i = items.indexOf(document.activeElement);
  if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
    e.preventDefault();
    const next = (i + (e.key === 'ArrowDown' ? 1 : -1) + items.length) % items.length;
    items[next].focus();
  } else if (e.key === 'Home' || e.key === 'End') {
    e.preventDefault();
    items[e.key === 'Home' ? 0 : items.length - 1].focus();
  } else if (e.key === 'Escape') {
    e.preventDefault();
    closeMenus({ restoreFocus: true });
  } else if (e.key === 'Tab') {
    closeMenus({ restoreFocus: true });
    e.preventDefault();
  }
}

// ---- Message menu: reply, delete for everyone ------------------------------------------------

export const msgMenuFor = { convId: null, seq: 0, scrollTop: 0 };

// openMessageMenu opens the menu of the message li next to the box at (its button, or the
// point a finger held). The menu floats over the pane, kept inside the window.
function openMessageMenu(li, at) {
  const c = openConv();
  const w = openWindow();
  const m = c && w && w.bySeq.get(Number(li.dataset.seq));
  if (!m || m.kind !== 'text') return;
  msgMenuFor.convId = c.id;
  msgMenuFor.seq = m.seq;
  msgMenuFor.scrollTop = ui.scroller.scrollTop;
  // Only the sender may delete for everyone, or in a group its owner and admins; only the sender
  // edits; any other member reports it to the group's admins.
  ui.msgDelete.hidden = m.senderId !== me() && !runsGroup(c);
  ui.msgEdit.hidden = m.senderId !== me();
  ui.msgReport.hidden = c.kind !== 'group' || m.senderId === me();
  ui.msgPin.hidden = !runsGroup(c); // the owner and admins pin
  ui.msgPin.textContent = (c.group?.pins || []).includes(m.seq) ? 'Unpin' : 'Pin';
  showMenu(ui.msgMenu, li.querySelector('.msg-actions'));
  const r = at;
  const mr = ui.msgMenu.getBoundingClientRect();
  const left = li.classList.contains('mine') ? r.right - mr.width : r.left;
  const below = r.bottom + 4 + mr.height <= window.innerHeight;
  ui.msgMenu.style.left = `${Math.max(8, Math.min(left, window.innerWidth - mr.width - 8))}px`;
  ui.msgMenu.style.top = `${below ? r.bottom + 4 : Math.max(8, r.top - mr.height - 4)}px`;
}

// Long-press: a touch held still on a bubble for LONG_PRESS_MS opens its menu. The click and the
// platform's context menu that follow the release are swallowed.
export const press = { timer: null, x: 0, y: 0, fired: false };

export function onListPointerDown(e) {
  press.fired = false; // a new gesture: a long-press that got no click after it is over
  if (e.pointerType !== 'touch') return;
  const li = e.target.closest('#messages > li[data-seq]');
  if (!li || !li.querySelector('.msg-actions') || e.target.closest('a, button')) return;
  cancelPress();
  press.x = e.clientX;
  press.y = e.clientY;
  const seq = li.dataset.seq;
  press.timer = setTimeout(() => {
    press.timer = null;
    press.fired = true;
    // The item may have been redrawn meanwhile (a tick changed): find it again by its seq.
    const now = ui.list.querySelector(`li[data-seq="${seq}"]`);
    const point = { left: press.x, right: press.x, top: press.y, bottom: press.y };
    if (now) openMessageMenu(now, point);
  }, LONG_PRESS_MS);
}

export function onListPointerMove(e) {
  if (press.timer && Math.hypot(e.clientX - press.x, e.clientY - press.y) > LONG_PRESS_SLOP_PX) cancelPress();
}

export function cancelPress() {
  clearTimeout(press.timer);
  press.timer = null;
}

export function onListClick(e) {
  if (press.fired) { // the release of a long-press
    press.fired = false;
    e.preventDefault();
    return;
  }
  const button = e.target.closest('.msg-actions');
  if (button) {
    if (openMenu.el === ui.msgMenu && openMenu.trigger === button) closeMenus({ restoreFocus: true });
    else openMessageMenu(button.closest('li'), button.getBoundingClientRect());
    return;
  }
  const chip = e.target.closest('.chip');
  if (chip) {
    const seq = Number(chip.closest('li').dataset.seq);
    react(shown.openId, seq, chip.dataset.emoji, chip.getAttribute('aria-pressed') === 'true');
    return;
  }
  const quote = e.target.closest('.quote');
  if (quote) jumpToMessage(Number(quote.dataset.seq));
}

// ---- Reactions ------------------------------------------------------------------------------

export function reactFromMenu(e) {
  const pick = e.target.closest('.react-pick');
  if (!pick) return;
  const { convId, seq } = msgMenuFor;
  const w = store.windows.get(convId);
  const m = w && w.bySeq.get(seq);
  const mine = m && (m.reactions || []).some((r) => r.emoji === pick.dataset.emoji && r.me);
  closeMenus({ restoreFocus: true });
  react(convId, seq, pick.dataset.emoji, mine);
}

// react adds (or, with remove, takes away) this user's emoji on a message. The chips change when
// the reaction frame comes back, on every device alike; a refusal (a limit) is told in words.
async function react(convId, seq, emoji, remove) {
  if (!convId || !seq) return;
  const frame = { type: 'react', conversationId: convId, seq, emoji };
  if (remove) frame.remove = true;
  try {
    await request(frame);
    announce(remove ? `Took away your ${emoji}` : `Reacted ${emoji}`);
  } catch (err) {
    showNotice(failureText(remove ? `Could not take away ${emoji}` : `Could not react with ${emoji}`, err));
  }
}

export async function deleteForEveryone() {
  const { convId, seq } = msgMenuFor;
  closeMenus();
  const ok = await confirmAction({
    title: 'Delete for everyone?',
    text: 'The message is removed for every member of the conversation. This cannot be undone.',
    ok: 'Delete',
  });
  if (!ok) return;
  try {
    await request({ type: 'delete_message', conversationId: convId, seq });
    onDeleted({ conversationId: convId, seq }); // the deleted frame follows; applying it twice is harmless
    announce('Message deleted');
  } catch (err) {
    showNotice(failureText('Could not delete the message', err));
  }
}

// ---- Conversation menu -----------------------------------------------------------------------

export const dmPeer = (c) => (c && c.kind === 'dm' ? c.members.find((m) => m !== me()) || '' : '');

export function openConvMenu() {
  const c = openConv();
  if (!c) return;
  if (openMenu.el === ui.convMenu) { closeMenus({ restoreFocus: true }); return; }
  const peer = dmPeer(c);
  ui.menuGroupInfo.hidden = c.kind !== 'group';
  ui.menuLeave.hidden = c.kind !== 'group';
  ui.menuBlock.hidden = !peer;
  ui.menuBlock.textContent = store.blocks.has(peer) ? `Unblock ${nameOf(peer)}` : `Block ${nameOf(peer)}`;
  for (const b of ui.menuNotify) b.setAttribute('aria-checked', String(b.dataset.notify === (c.notify || 'all')));
  showMenu(ui.convMenu, ui.convMenuButton);
}

export async function hideConversation() {
  const c = openConv();
  closeMenus();
  if (!c) return;
  const ok = await confirmAction({
    title: 'Delete this conversation for you?',
    text: `${convTitle(c)} leaves your list and its history is cleared for you; the others keep theirs. A new message brings it back.`,
    ok: 'Delete for me',
  });
  if (!ok) return;
  try {
    await request({ type: 'hide_conversation', conversationId: c.id });
    onHidden({ conversationId: c.id, seq: c.lastSeq }); // the hidden frame says the same
  } catch (err) {
    showNotice(failureText('Could not delete the conversation', err));
  }
}

export async function leaveGroup() {
  const c = openConv();
  closeMenus();
  if (!c || c.kind !== 'group') return;
  const ok = await confirmAction({
    title: `Leave ${convTitle(c)}?`,
    text: 'You stop getting its messages. Someone in the group can add you again.',
    ok: 'Leave group',
  });
  if (!ok) return;
  try {
    await request({ type: 'leave', conversationId: c.id });
    removeConv(c.id); // the removed frame says the same
    announce(`You left ${convTitle(c)}`);
  } catch (err) {
    showNotice(failureText('Could not leave the group', err));
  }
}

export async function toggleBlockFromMenu() {
  const peer = dmPeer(openConv());
  closeMenus();
  if (!peer) return;
  if (store.blocks.has(peer)) { await setBlocked(peer, false, showNotice); return; }
  const ok = await confirmAction({
    title: `Block ${nameOf(peer)}?`,
    text: 'Neither of you can message the other or add the other to a group until you unblock. They are not told.',
    ok: 'Block',
  });
  if (ok) await setBlocked(peer, true, showNotice);
}
