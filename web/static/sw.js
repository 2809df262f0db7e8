// The service worker (at the origin's root, so its scope is the whole page): it shows the Web Push
// notifications the server sends while nobody has the page open, closes one when it is
// withdrawn (read on another device), and opens or focuses the page on the conversation when one
// is clicked. The payload is described in docs/PROTOCOL.md, "Web Push".

self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (event) => event.waitUntil(self.clients.claim()));

self.addEventListener('push', (event) => {
  let p;
  try { p = event.data.json(); } catch { return; }
  if (!p || !p.tag) return;
  event.waitUntil(p.type === 'withdraw' ? withdraw(p) : show(p));
});

self.addEventListener('notificationclick', (event) => event.waitUntil(openFromNotification(event.notification)));

// notificationText is what a message notification says: who (and in which group), and the text
// or, with previews off, only that there is something.
function notificationText(p) {
  const inGroup = p.conversationName && p.conversationName !== p.senderName;
  const title = inGroup ? `${p.senderName} in ${p.conversationName}` : p.senderName;
  const text = p.body || 'New message';
  return { title, body: p.count > 1 ? `${text} (${p.count} unread)` : text };
}

// show shows a conversation's notification, replacing the one it showed (same tag).
function show(p) {
  const { title, body } = notificationText(p);
  return self.registration.showNotification(title, {
    body, tag: p.tag, renotify: true,
    data: { conversationId: p.conversationId, seq: p.seq, firstUnreadSeq: p.firstUnreadSeq },
  });
}

// withdraw closes the conversation's notification if the read covers what it shows.
async function withdraw(p) {
  for (const n of await self.registration.getNotifications({ tag: p.tag })) {
    if (!n.data || n.data.seq <= p.seq) n.close();
  }
}

// openFromNotification closes the notification and shows its conversation: in a tab of the page
// if one is open (focused, and told which conversation to open: it opens at the first unread),
// else in a new tab whose address names the conversation.
async function openFromNotification(n) {
  n.close();
  const id = n.data && n.data.conversationId;
  if (!id) return;
  const tabs = await self.clients.matchAll({ type: 'window', includeUncontrolled: true });
  if (tabs.length === 0) {
    await self.clients.openWindow(`/#c=${encodeURIComponent(id)}`);
    return;
  }
  const tab = tabs.find((t) => t.focused) || tabs[0];
  tab.postMessage({ type: 'open-conversation', conversationId: id });
  try { await tab.focus(); } catch { /* focusing needs the click's user activation; the tab still opens it */ }
}
