// Desktop notifications, and the conversation's "Notify me for" setting (kept by the server).

import { openConversation } from './conversation.js';
import { request } from './connection.js';
import { announce, ui } from './dom.js';
import { attachmentLabel, firstAttachment } from './files.js';
import { closeMenus, showNotice } from './menus.js';
import { convTitle, failureText, mentionsAsNames, nameOf } from './names.js';
import { NOTIFY_BODY_CHARS, NOTIFY_KEY, me, openConv, store } from './state.js';

// ---- Desktop notifications ------------------------------------------------------------------

// "Notify me" (settings) asks the browser's permission from the switch's own click, the user
// gesture browsers want. While it is on and the tab is hidden, a message of someone else brings
// a desktop notification, one per conversation (a newer one replaces it); a click on it focuses
// the tab with that conversation open. A conversation set to notify for nothing never notifies,
// one set to mentions only for the messages that mention the user; one that comes back after
// "Delete for me" neither; system messages and deletions neither.
export const notifications = new Map(); // conversation id -> the notification it shows

const notifySupported = () => typeof window.Notification === 'function';
export const notifyOn = () => notifySupported() && Notification.permission === 'granted' && localStorage.getItem(NOTIFY_KEY + me()) === 'on';

export async function setNotify() {
  const want = ui.notifySwitch.checked;
  ui.settingsError.textContent = '';
  if (!want) {
    localStorage.removeItem(NOTIFY_KEY + me());
    ui.notifyStatus.textContent = 'You are not notified.';
    return;
  }
  if (!notifySupported()) {
    ui.notifySwitch.checked = false;
    ui.notifyStatus.textContent = 'This browser cannot show notifications.';
    return;
  }
  let permission = Notification.permission;
  if (permission === 'default') {
    ui.notifySwitch.disabled = true;
    ui.notifyStatus.textContent = 'Waiting for the browser\'s permission…';
    try {
      permission = await Notification.requestPermission();
    } catch {
      permission = 'denied';
    } finally {
      ui.notifySwitch.disabled = false;
    }
  }
  if (permission !== 'granted') {
    ui.notifySwitch.checked = false;
    ui.notifyStatus.textContent = 'Notifications are blocked for this page in the browser\'s settings.';
    return;
  }
  localStorage.setItem(NOTIFY_KEY + me(), 'on');
  ui.notifyStatus.textContent = 'You are notified of new messages while this tab is hidden.';
}

// setConvNotify stores the open conversation's "Notify me for" (a menu item's data-notify) on
// the server, for every device; the notify frame that follows updates the list here too.
export async function setConvNotify(e) {
  const c = openConv();
  const level = e.currentTarget.dataset.notify;
  closeMenus({ restoreFocus: true });
  if (!c || !level) return;
  try {
    await request({ type: 'set_notify', conversationId: c.id, notify: level });
    announce({ all: `Notified of every message in ${convTitle(c)}`, mentions: `Notified only of mentions in ${convTitle(c)}`,
      nothing: `${convTitle(c)} muted` }[level]);
  } catch (err) {
    showNotice(failureText('Could not change the notifications', err));
  }
}

export function notifyDesktop(c, m) {
  if (!c || m.kind !== 'text' || document.visibilityState !== 'hidden' || !notifyOn() || c.notify === 'nothing') return;
  if (c.notify === 'mentions' && !(m.mentions || []).includes(me())) return;
  const title = c.kind === 'group' ? `${nameOf(m.senderId)} in ${convTitle(c)}` : nameOf(m.senderId);
  const text = (mentionsAsNames(m.body || '') || attachmentLabel(firstAttachment(m))).replace(/\s+/g, ' ').trim();
  let n;
  try {
    n = new Notification(title, {
      body: text.length > NOTIFY_BODY_CHARS ? `${text.slice(0, NOTIFY_BODY_CHARS)}…` : text,
      tag: c.id, // a newer message of the conversation replaces its notification
    });
  } catch {
    return; // a platform that allows only service-worker notifications
  }
  notifications.set(c.id, n);
  n.onclick = () => {
    window.focus();
    n.close();
    if (store.convs.has(c.id)) openConversation(c.id, { focus: true });
  };
  n.onclose = () => { if (notifications.get(c.id) === n) notifications.delete(c.id); };
}

// closeNotification takes away the notification of a conversation the user has opened.
export function closeNotification(id) {
  const n = notifications.get(id);
  if (!n) return;
  notifications.delete(id);
  n.close();
}
