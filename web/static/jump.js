// The Jump picker of the conversation header.

import { fetchPage, replaceWindow } from './conversation.js';
import { announce, ui } from './dom.js';
import { closeMenus } from './menus.js';
import { failureText } from './names.js';
import { dayKey, dayLabel, openConv, shown } from './state.js';

// ---- Jump picker -----------------------------------------------------------------------------

// The Jump button opens a small picker: the first unread message, a date, the oldest or the
// newest message. Choosing (with the mouse or the arrow keys) moves nothing; only its Jump
// button does. Each jump loads one window of range pages around its target, like a reply's quote.

export function openJumpPicker() {
  const c = openConv();
  if (!c) return;
  closeMenus();
  const unread = c.unread > 0;
  ui.jumpUnread.disabled = !unread;
  ui.jumpUnreadLabel.textContent = unread ? `First unread message (${c.unread} unread)` : 'First unread message (none)';
  ui.jumpDate.max = dayKey(new Date());
  if (!ui.jumpDate.value) ui.jumpDate.value = dayKey(new Date());
  ui.jumpForm.elements.target.value = unread ? 'unread' : 'date';
  ui.jumpStatus.textContent = '';
  ui.jumpGo.disabled = false;
  ui.jumpPicker.showModal();
  (unread ? ui.jumpUnread : ui.jumpDate).focus();
}

export async function confirmJump(ev) {
  ev.preventDefault();
  const c = openConv();
  if (!c) { ui.jumpPicker.close(); return; }
  const target = ui.jumpForm.elements.target.value;
  ui.jumpStatus.textContent = '';
  if (target === 'unread') {
    ui.jumpPicker.close();
    if (c.unread <= 0) return;
    shown.following = false;
    shown.divider = { convId: c.id, afterSeq: c.readSeq };
    replaceWindow(c.id, { around: c.readSeq + 1 }, { toSeq: c.readSeq + 1, divider: true });
  } else if (target === 'oldest') {
    ui.jumpPicker.close();
    shown.following = false;
    replaceWindow(c.id, { after: Math.max(0, c.firstSeq - 1) }, { top: true });
  } else if (target === 'newest') {
    ui.jumpPicker.close();
    shown.following = true;
    replaceWindow(c.id, {}, { bottom: true });
  } else {
    const [y, mo, d] = ui.jumpDate.value.split('-').map(Number);
    if (!y || !mo || !d) { ui.jumpStatus.textContent = 'Pick a date.'; return; }
    const day = new Date(y, mo - 1, d); // local midnight: the day as the user's calendar has it
    ui.jumpGo.disabled = true;
    ui.jumpStatus.textContent = 'Finding…';
    let seq;
    try {
      seq = await firstSeqSince(c, day.getTime());
    } catch (err) {
      ui.jumpStatus.textContent = failureText('Could not look for that date', err);
      return;
    } finally {
      ui.jumpGo.disabled = false;
    }
    if (shown.openId !== c.id) { ui.jumpPicker.close(); return; }
    if (!seq) {
      ui.jumpStatus.textContent = `No messages on or after ${day.toLocaleDateString([], { day: 'numeric', month: 'long', year: 'numeric' })}.`;
      return;
    }
    ui.jumpPicker.close();
    shown.following = false;
    replaceWindow(c.id, { around: seq }, { toSeq: seq, dayStart: true, highlight: true });
    announce(`Showing messages from ${dayLabel(day)}`);
  }
}

// firstSeqSince finds the first message of c written at or after time t (ms), or 0 when there
// is none: a binary search over seqs with one range page per step (seqs and their times grow
// together), so a conversation of a million messages takes about fifteen pages.
async function firstSeqSince(c, t) {
  let lo = c.firstSeq;
  let hi = c.lastSeq;
  let found = 0;
  while (lo <= hi) {
    const mid = Math.floor((lo + hi) / 2);
    const page = await fetchPage(c.id, { around: mid });
    const msgs = page.messages.filter((m) => m.seq >= lo && m.seq <= hi);
    if (!msgs.length) break;
    const i = msgs.findIndex((m) => Date.parse(m.createdAt) >= t);
    if (i === -1) { lo = msgs[msgs.length - 1].seq + 1; continue; }
    found = msgs[i].seq;
    if (i > 0) break; // the message before it, in this page, is older: found is the first
    hi = msgs[0].seq - 1;
  }
  return found;
}
