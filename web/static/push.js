// Web Push on this device: after the user's click in settings, the service worker (sw.js) is
// registered and this device's push subscription handed to the server; whether notifications
// show the text (the server-side preview setting); and opening the conversation a
// notification was clicked for.

import { openConversation } from './conversation.js';
import { ui } from './dom.js';
import { me, store } from './state.js';

const DEVICE_KEY = 'chatd.pushDevice'; // this browser's device id, the same for every user of it
const PUSH_KEY = 'chatd.push.'; // 'on' when this device is subscribed for the user

const pushSupported = () => 'serviceWorker' in navigator && 'PushManager' in window && typeof window.Notification === 'function';
export const pushOn = () => localStorage.getItem(PUSH_KEY + me()) === 'on';

function deviceId() {
  let id = localStorage.getItem(DEVICE_KEY);
  if (!id) {
    id = crypto.randomUUID().replaceAll('-', '');
    localStorage.setItem(DEVICE_KEY, id);
  }
  return id;
}

// api calls a Web Push endpoint with the user's token; a refusal throws its error text.
async function api(method, path, body) {
  const resp = await fetch(path, {
    method,
    headers: { Authorization: `Bearer ${store.auth.token}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!resp.ok) {
    let msg = `the server answered ${resp.status}`;
    try { msg = (await resp.json()).error || msg; } catch { /* not JSON */ }
    throw new Error(msg);
  }
  return resp.status === 204 ? null : resp.json();
}

// setPush turns Web Push on or off for this device, from the switch's own click (the gesture
// browsers want before they ask for the permission).
export async function setPush() {
  const want = ui.pushSwitch.checked;
  ui.settingsError.textContent = '';
  ui.pushSwitch.disabled = true;
  ui.pushStatus.textContent = want ? 'Turning on…' : 'Turning off…';
  try {
    if (want) {
      await subscribe();
      localStorage.setItem(PUSH_KEY + me(), 'on');
      await saveSettings();
    } else {
      localStorage.removeItem(PUSH_KEY + me());
      await unsubscribe();
    }
    ui.previewSwitch.disabled = !want;
    ui.pushStatus.textContent = want ? 'This device is notified of new messages while you are away.' : 'This device is not notified while you are away.';
  } catch (err) {
    ui.pushSwitch.checked = !want;
    if (!want) localStorage.setItem(PUSH_KEY + me(), 'on');
    ui.pushStatus.textContent = '';
    ui.settingsError.textContent = `Could not turn ${want ? 'on' : 'off'} notifications on this device: ${err.message}`;
  } finally {
    ui.pushSwitch.disabled = false;
  }
}

async function subscribe() {
  if (!pushSupported()) throw new Error('this browser has no Web Push');
  const permission = Notification.permission === 'default' ? await Notification.requestPermission() : Notification.permission;
  if (permission !== 'granted') throw new Error('notifications are blocked for this page in the browser\'s settings');
  await navigator.serviceWorker.register('/sw.js');
  const reg = await navigator.serviceWorker.ready;
  const { publicKey } = await api('GET', '/api/push/key');
  const sub = await reg.pushManager.getSubscription() || await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: publicKey });
  await api('PUT', `/api/push/subscriptions/${deviceId()}`, sub.toJSON());
}

async function unsubscribe() {
  await api('DELETE', `/api/push/subscriptions/${deviceId()}`);
  const reg = await navigator.serviceWorker.getRegistration();
  const sub = reg && await reg.pushManager.getSubscription();
  if (sub) await sub.unsubscribe();
}

// saveSettings tells the server whether notifications show the text.
async function saveSettings() {
  await api('PUT', '/api/push/settings', { preview: ui.previewSwitch.checked });
}

export async function setPreview() {
  ui.settingsError.textContent = '';
  const show = ui.previewSwitch.checked;
  try {
    await saveSettings();
    ui.previewStatus.textContent = show ? 'Notifications show the message.' : 'Notifications say only "New message".';
  } catch (err) {
    ui.previewSwitch.checked = !show;
    ui.settingsError.textContent = `Could not change what notifications show: ${err.message}`;
  }
}

// openPushSettings fills the push switches when settings open. The text preview matters only
// with push on, and the server is asked only then (a server without Web Push has no such API).
export async function openPushSettings() {
  ui.pushSwitch.checked = pushOn();
  ui.previewSwitch.disabled = !pushOn();
  ui.pushStatus.textContent = '';
  ui.previewStatus.textContent = '';
  if (!pushOn()) return;
  try {
    const set = await api('GET', '/api/push/settings');
    ui.previewSwitch.checked = set.preview;
  } catch { /* the switch keeps its last state; saving it says what went wrong */ }
}

// The service worker asks an open tab to show the conversation of a clicked notification.
if ('serviceWorker' in navigator) {
  navigator.serviceWorker.addEventListener('message', (e) => {
    const id = e.data && e.data.type === 'open-conversation' && e.data.conversationId;
    if (id && store.convs.has(id)) openConversation(id, { focus: true });
  });
}
