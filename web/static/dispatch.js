// The frame dispatcher: the one place that writes the store (state.js), together with its other
// half, dispatch-windows.js, which puts messages into the store's message windows. Server frames
// come here from the socket (handleFrame); the replies to requests come back here from the module
// that asked, through the apply functions below. Each writes the store and then asks the views
// that show what changed to render again; views never write the store themselves.

import { ackedMessage, confirmSend, pending } from './composer.js';
import { settleReply } from './connection.js';
import { closeConversation, renderTyping, showConversation } from './conversation.js';
import { deliver } from './dispatch-windows.js';
import { announce, ui } from './dom.js';
import { attachmentLabel, firstAttachment } from './files.js';
import { noteReports, renderGroupState } from './groupadmin.js';
import { renderGroupInfo } from './groupinfo.js';
import { refreshListSoon, renderConvList, updateTitle } from './list.js';
import { dmPeer } from './menus.js';
import { renderMessages, updateCue } from './messages.js';
import { convTitle, nameOf, namesChanged } from './names.js';
import { notifyDesktop } from './notifications.js';
import { noteReceived, refreshReceiptsSoon } from './reads.js';
import { onHello } from './session.js';
import { AUTH_KEY, LIST_PREVIEW_CHARS, TYPING_SHOW_MS, me, openConv, shown, store } from './state.js';

// ---- Frames ----------------------------------------------------------------------------------

export function handleFrame(f) {
  if (settleReply(f)) return; // the reply to a request: its caller hands it back to a function here
  switch (f.type) {
    case 'hello': onHello(f); break;
    case 'badge': onBadge(f); break;
    case 'message': onMessage(f); break;
    case 'ack': confirmSend(f.clientMsgId, ackedMessage(f)); break; // an ack that came after its timeout
    case 'conversation': if (f.conversation) onConversation(f.conversation); break;
    case 'conversations': applyConversationList(f.conversations || []); break;
    case 'cursor': onCursor(f); break;
    case 'receipt': onReceipt(f); break;
    case 'typing': onTyping(f); break;
    case 'removed': removeConv(f.conversationId); break;
    case 'hidden': onHidden(f); break;
    case 'deleted': onDeleted(f); break;
    case 'edited': onEdited(f); break;
    case 'reaction': onReaction(f); break;
    case 'changes': onChanges(f); break;
    case 'delivered': onPeerDelivered(f); break;
    case 'presence': onPresence(f); break;
    case 'profile': onProfile(f); break;
    case 'reports': noteReports(f); break; // a member's report, for this user, an admin
    case 'notify': onNotify(f); break;
    case 'error': ui.sidebarError.textContent = f.message || f.code; break;
    default: break; // frames added to the protocol later are ignored
  }
}

// ---- Sign-in and names -------------------------------------------------------------------------

// setAuth keeps the sign-in (the answer of /api/login, or the one this device saved), or forgets
// it (null).
export function setAuth(auth) {
  store.auth = auth;
  if (auth) localStorage.setItem(AUTH_KEY, JSON.stringify(auth));
  else localStorage.removeItem(AUTH_KEY);
}

// clearStore forgets everything the server said, at sign-out.
export function clearStore() {
  setAuth(null);
  store.convs.clear();
  store.windows.clear();
  store.blocks.clear();
  store.presence.clear();
  store.names.clear();
  store.total = 0;
}

function onProfile(f) {
  if (!f.userId) return;
  if (f.userId === me()) {
    setOwnName(f.name || store.auth.name);
  } else {
    store.names.set(f.userId, { name: f.name || '' });
  }
  namesChanged();
}

export function setOwnName(name) {
  if (!store.auth || !name || store.auth.name === name) return;
  store.auth.name = name;
  localStorage.setItem(AUTH_KEY, JSON.stringify(store.auth));
}

// applyBlocked keeps a block or an unblock the server accepted; applyBlockList, the list of a
// list_blocks reply.
export function applyBlocked(userId, block) {
  if (block) store.blocks.add(userId); else store.blocks.delete(userId);
}

export function applyBlockList(userIds) {
  store.blocks = new Set(userIds);
}

// applyProfiles keeps a profiles reply for the users asked about (batch).
export function applyProfiles(batch, r) {
  for (const u of r.users || []) store.names.set(u.userId, { name: u.name || '', deleted: !!u.deleted });
  // Ids the server does not know keep showing as ids, and are not asked for again.
  for (const id of batch) if (!store.names.has(id)) store.names.set(id, { name: '' });
}

// learnNames keeps the names of the people a find_users reply found.
export function learnNames(users) {
  for (const u of users) store.names.set(u.userId, { name: u.name || '' });
}

// ---- Conversations ---------------------------------------------------------------------------

function upsertConv(v) {
  let c = store.convs.get(v.id);
  if (!c) {
    c = {
      id: v.id, kind: v.kind, name: v.name || '', members: [], lastSeq: 0, readSeq: 0, unread: 0,
      activity: Date.parse(v.createdAt) || 0, peerReadSeq: 0, groupReads: null, typing: new Map(),
      peerDeliveredSeq: 0, // in a DM, how far the other member's devices have received
      // The change version this page holds of the conversation's messages (see noteVersion):
      // that of the first view of it, no later than any page loaded since (a lower one only
      // brings changes again), then what each sync reply says.
      heldVersion: v.version || 0,
      deletedSeqs: new Set(), // seqs this page saw deleted for everyone, for the quotes of replies to them
      firstSeq: 1, // the oldest seq this user can see; later after "delete conversation for me"
      gone: new Set(), // seqs above readSeq known to be tombstones (deleted for everyone): never unread
      mentionSeqs: new Set(), // seqs above readSeq this page saw mention the user (see noteMention)
    };
    store.convs.set(v.id, c);
  }
  c.kind = v.kind;
  c.name = v.name || '';
  c.members = v.members || [];
  c.createdBy = v.createdBy || '';
  c.group = v.group || null; // roles and settings (groupadmin.js)
  // The newest message, for the list: the view's, unless a push brought a newer one meanwhile.
  const lm = v.lastMessage;
  if (lm && lm.seq > 0 && (!c.last || lm.seq >= c.last.seq)) c.last = listPreview(lm);
  else if (!lm && c.last && c.last.seq <= (v.lastSeq || 0)) c.last = null; // none (deleted for me)
  if (c.last) c.activity = Math.max(c.activity, Date.parse(c.last.createdAt) || 0);
  c.lastSeq = Math.max(c.lastSeq, v.lastSeq || 0);
  c.readSeq = Math.max(c.readSeq, v.readSeq || 0);
  c.unread = v.unread || 0; // the server's exact count
  c.unreadMentions = v.unreadMentions || 0; // also exact
  c.notify = v.notify || c.notify || 'all'; // a conversation push carries none: keep what is known
  pruneGone(c);
  return c;
}

export function onConversation(v) {
  const isNew = !store.convs.has(v.id);
  const c = upsertConv(v);
  if (isNew && c.kind === 'group') announce(`You were added to ${convTitle(c)}`);
  recountTotal();
  renderConvList();
}

// applyConversationList applies a conversation list; the one of a sync reply also says which
// change version the page now holds of each (docs/PROTOCOL.md, sync).
export function applyConversationList(list, { synced = false } = {}) {
  const seen = new Set();
  for (const v of list) {
    const c = upsertConv(v);
    if (synced) c.heldVersion = changesMore.has(c.id) ? changesMore.get(c.id) : v.version || 0;
    seen.add(v.id);
  }
  for (const id of [...store.convs.keys()]) if (!seen.has(id)) removeConv(id);
  recountTotal();
  renderConvList();
  renderGroupState();
}

export function removeConv(id) {
  store.convs.delete(id);
  store.windows.delete(id);
  shown.replyTo.delete(id);
  if (shown.openId === id) closeConversation();
  recountTotal();
  renderConvList();
}

// listPreview is what the conversation list keeps of a conversation's newest message (the
// server's lastMessage, or a pushed message): its seq, sender, kind, time and the start of its
// text on one line.
function listPreview(m) {
  const text = m.kind === 'deleted' ? '' : (m.body || '').replace(/\s+/g, ' ').trim();
  return { seq: m.seq, senderId: m.senderId || '', kind: m.kind || 'text', createdAt: m.createdAt,
    body: text.length > LIST_PREVIEW_CHARS ? `${text.slice(0, LIST_PREVIEW_CHARS)}…` : text,
    attachment: m.kind === 'deleted' ? null : m.attachment || firstAttachment(m) };
}

// notePreview keeps m as c's newest message when it is (a message push, a replay, a page).
export function notePreview(c, m) {
  if (!c || !(m.seq >= c.firstSeq) || (c.last && m.seq < c.last.seq)) return;
  c.last = listPreview(m);
  c.activity = Math.max(c.activity, Date.parse(m.createdAt) || Date.now());
}

// changePreview applies an edit or a deletion of seq to the list's preview, when it shows seq.
function changePreview(convId, seq, change) {
  const c = store.convs.get(convId);
  if (!c || !c.last || c.last.seq !== seq) return;
  change(c.last);
  renderConvList();
}

export function recountTotal() {
  let total = 0;
  for (const c of store.convs.values()) total += c.unread;
  store.total = total;
  updateTitle();
}

// Unread is lastSeq - readSeq less the tombstones in between (docs/PROTOCOL.md, Unread). Views
// and badge frames carry the exact count; between them the page keeps its own from the pushes,
// knowing the tombstones it has seen by seq in c.gone.

// goneIn counts the known tombstones of c with a seq in (lo, hi].
function goneIn(c, lo, hi) {
  let n = 0;
  for (const s of c.gone) if (s > lo && s <= hi) n++;
  return n;
}

// pruneGone forgets tombstones at or below the read position: they count for nothing any more.
function pruneGone(c) {
  for (const s of c.gone) if (s <= c.readSeq) c.gone.delete(s);
}

// rememberGone notes the tombstones of a history page or sync replay; the count is left alone
// (views and badges that came since they were deleted already leave them out).
export function rememberGone(c, m) {
  if (c && m && m.kind === 'deleted' && m.seq > c.readSeq) c.gone.add(m.seq);
}

// applyOwnRead moves readSeq for a read of this user (this page's or another device's): the seqs
// read over that are not known tombstones are no longer unread. The badge that follows is exact.
// A cursor ahead of lastSeq (its messages not here yet) subtracts only what is counted; those
// messages add nothing when they come, as they are at or below readSeq.
export function applyOwnRead(c, newRead) {
  const oldRead = c.readSeq;
  if (newRead <= oldRead) return;
  const upto = Math.min(newRead, c.lastSeq);
  if (upto > oldRead) c.unread = Math.max(0, c.unread - ((upto - oldRead) - goneIn(c, oldRead, upto)));
  c.readSeq = newRead;
  for (const s of c.mentionSeqs) if (s <= newRead) noteMention(c, s, false);
  pruneGone(c);
}

// noteMention counts a message above readSeq that mentions the user (or, with on false, no longer
// does), once per seq: between the server's counts, the page keeps its own (docs/PROTOCOL.md,
// Mentions).
function noteMention(c, seq, on) {
  if (!c || on === c.mentionSeqs.has(seq)) return;
  if (on) {
    if (seq <= c.readSeq) return;
    c.mentionSeqs.add(seq);
    c.unreadMentions++;
  } else {
    c.mentionSeqs.delete(seq);
    c.unreadMentions = Math.max(0, c.unreadMentions - 1);
  }
}

const mentionsMe = (m) => (m.mentions || []).includes(me());

function onNotify(f) {
  const c = store.convs.get(f.conversationId);
  if (!c || !f.notify) return;
  c.notify = f.notify;
  renderConvList();
}

function onBadge(f) {
  if (typeof f.total === 'number') store.total = f.total;
  const c = f.conversationId && store.convs.get(f.conversationId);
  if (f.conversationId && !c) refreshListSoon();
  if (c) {
    if (typeof f.unread === 'number') c.unread = f.unread;
    if (typeof f.unreadMentions === 'number') c.unreadMentions = f.unreadMentions;
    for (const s of c.mentionSeqs) if (s <= (f.readSeq || 0)) c.mentionSeqs.delete(s);
    c.readSeq = Math.max(c.readSeq, f.readSeq || 0);
    c.lastSeq = Math.max(c.lastSeq, f.lastSeq || 0);
    pruneGone(c);
  }
  updateTitle();
  renderConvList();
}

// onHidden: the user deleted the conversation for themselves (here or on another device). It
// leaves the list until someone writes in it again, and its history now starts after seq.
export function onHidden(f) {
  const c = store.convs.get(f.conversationId);
  if (!c) return;
  c.firstSeq = Math.max(c.firstSeq, (f.seq || 0) + 1);
  c.unread = 0;
  c.last = null; // its history, for this user, is gone
  c.hidden = true; // until a new message brings it back (which notifies nobody)
  store.windows.delete(c.id);
  if (shown.openId === c.id) closeConversation();
  recountTotal();
  renderConvList();
}

// onDeleted: a message was deleted for everyone; it stays in place as a tombstone.
// No badge comes with it: an unread message that became a tombstone is one less unread, once per
// seq, whether or not it is loaded. One above lastSeq is remembered, and adds nothing when it comes.
export function onDeleted(f) {
  const c = store.convs.get(f.conversationId);
  if (c) noteMention(c, f.seq, false);
  if (c && f.seq > 0 && !c.gone.has(f.seq)) {
    if (f.seq > c.readSeq) c.gone.add(f.seq);
    if (f.seq > c.readSeq && f.seq <= c.lastSeq) c.unread = Math.max(0, c.unread - 1);
    recountTotal();
    renderConvList();
  }
  if (c) c.deletedSeqs.add(f.seq); // replies quoting it show the quote as deleted
  changePreview(f.conversationId, f.seq, (p) => { p.kind = 'deleted'; p.body = ''; p.attachment = null; });
  applyChange(f.conversationId, f.seq, f.version, (m) => {
    m.kind = 'deleted';
    m.body = '';
    delete m.reactions;
    delete m.editedAt;
    delete m.quote;
    delete m.attachments;
  }, true);
  // Replies to it that are on screen show their quote as deleted, also when it is not loaded.
  if (f.conversationId === shown.openId) renderMessages();
}

// ---- Changes of messages: edits, reactions, deletions -------------------------------------

// A message keeps its seq; its text, reactions and kind may change, each change with the
// conversation's next version. The page keeps, per seq, the state with the higher version, so
// a change that arrives twice (a live frame, then a sync catch-up) or late is applied once.

const changesMore = new Map(); // conversation id -> version a changes frame with hasMore stopped at

// syncStarting forgets where earlier catch-ups stopped; syncCutShort, after the sync reply, says
// whether one of this sync's stopped at its limit, so the rest is asked for.
export function syncStarting() {
  changesMore.clear();
}

export const syncCutShort = () => changesMore.size > 0;

// noteVersion advances the version the page holds of c, but only by one: a gap means a change
// this page has not seen, which the next sync brings (docs/PROTOCOL.md, sync).
function noteVersion(c, version) {
  if (c && version && version === c.heldVersion + 1) c.heldVersion = version;
}

// applyChange changes the held message seq of a conversation with change when version is newer
// than what the page holds of it; a message the page does not hold comes right in its next page.
function applyChange(convId, seq, version, change, force = false) {
  noteVersion(store.convs.get(convId), version);
  const w = store.windows.get(convId);
  const m = w && w.bySeq.get(seq);
  if (!m) return;
  if (version ? (m.version || 0) >= version : !force) return;
  const next = { ...m, reactions: (m.reactions || []).map((r) => ({ ...r })) };
  change(next);
  if (version) next.version = version;
  w.bySeq.set(seq, next);
  if (convId === shown.openId) renderMessages();
}

function onEdited(f) {
  const c = store.convs.get(f.conversationId);
  if (c && f.seq <= c.lastSeq) { noteMention(c, f.seq, mentionsMe(f)); renderConvList(); }
  changePreview(f.conversationId, f.seq, (p) => { if (p.kind === 'text') Object.assign(p, listPreview({ ...p, body: f.body })); });
  applyChange(f.conversationId, f.seq, f.version, (m) => {
    if (m.kind !== 'text') return;
    m.body = f.body || '';
    m.editedAt = f.editedAt;
    m.mentions = f.mentions;
  });
}

// editSaved shows an edit the server accepted at once; the edited frame that follows brings its
// version and time.
export function editSaved(convId, seq, body) {
  applyChange(convId, seq, 0, (x) => { x.body = body; x.editedAt = x.editedAt || new Date().toISOString(); }, true);
}

// onReaction applies one member's reaction: the emoji's count, and "me" when it is this user's.
function onReaction(f) {
  applyChange(f.conversationId, f.seq, f.version, (m) => {
    let r = m.reactions.find((x) => x.emoji === f.emoji);
    if (!r) { r = { emoji: f.emoji, count: 0 }; m.reactions.push(r); }
    r.count = f.count || 0;
    if (f.userId === me()) r.me = !f.remove;
    m.reactions = m.reactions.filter((x) => x.count > 0);
  });
}

// onChanges: a sync catch-up, the held messages as they are now; each replaces the held one
// when newer.
function onChanges(f) {
  const w = store.windows.get(f.conversationId);
  for (const m of f.messages || []) {
    changePreview(f.conversationId, m.seq, (p) => Object.assign(p, listPreview(m)));
    const held = w && w.bySeq.get(m.seq);
    if (m.kind === 'deleted') onDeleted({ conversationId: f.conversationId, seq: m.seq, version: 0 });
    if (held && (m.version || 0) > (held.version || 0)) w.bySeq.set(m.seq, m);
  }
  if (f.hasMore) changesMore.set(f.conversationId, f.version);
  if (f.conversationId === shown.openId) renderMessages();
}

function onCursor(f) {
  const c = store.convs.get(f.conversationId);
  if (!c) return;
  applyOwnRead(c, f.readSeq || 0);
  recountTotal();
  renderConvList();
  if (c.id === shown.openId) updateCue(); // read on another device: fewer are new here too
}

function onReceipt(f) {
  const c = store.convs.get(f.conversationId);
  if (!c || f.userId === me()) return;
  if (c.kind === 'dm') {
    c.peerReadSeq = Math.max(c.peerReadSeq, f.readSeq || 0);
    if (c.id === shown.openId) renderMessages();
  } else if (c.id === shown.openId && c.groupReads && (f.readSeq || 0) >= c.groupReads.from) {
    refreshReceiptsSoon(); // a count of an own message on screen grew
  }
}

function onTyping(f) {
  const c = store.convs.get(f.conversationId);
  if (!c || f.userId === me()) return;
  c.typing.set(f.userId, Date.now() + TYPING_SHOW_MS);
  renderTyping();
  renderConvList();
  setTimeout(() => { renderTyping(); renderConvList(); }, TYPING_SHOW_MS + 50);
}

// ---- Receipts --------------------------------------------------------------------------------

// applyReceipts keeps a DM's receipts reply about own message seq: the peer's read position, and
// whether seq reached the peer's devices.
export function applyReceipts(c, seq, r) {
  for (const rd of r.readers || []) if (rd.userId !== me()) c.peerReadSeq = Math.max(c.peerReadSeq, rd.readSeq);
  if (r.deliveredTo >= 1) c.peerDeliveredSeq = Math.max(c.peerDeliveredSeq, seq);
}

// applyLastReceipts keeps a DM's receipts reply about the newest own message, last: delivered or
// read there means delivered or read up to there.
export function applyLastReceipts(c, last, r) {
  if (r.deliveredTo >= 1) c.peerDeliveredSeq = Math.max(c.peerDeliveredSeq, last);
  if (r.readBy >= 1) c.peerReadSeq = Math.max(c.peerReadSeq, last);
}

// applyGroupReads keeps who has read the own messages of a group, from its receipts replies (see
// groupReadBy).
export function applyGroupReads(c, g) {
  c.groupReads = g;
}

// onPeerDelivered: the other member of a DM has received up to deliveredSeq: ✓✓ on own messages.
function onPeerDelivered(f) {
  const c = store.convs.get(f.conversationId);
  if (!c || c.kind !== 'dm' || f.userId === me()) return;
  if ((f.deliveredSeq || 0) <= c.peerDeliveredSeq) return;
  c.peerDeliveredSeq = f.deliveredSeq;
  if (c.id === shown.openId) renderMessages();
}

export function onMessage(m) {
  if (!m || !m.conversationId || !(m.seq > 0)) return;
  const c = store.convs.get(m.conversationId);
  if (m.senderId !== me()) noteReceived(m.conversationId, m.seq);
  if (c && m.kind === 'deleted') c.deletedSeqs.add(m.seq);
  notePreview(c, m);
  const isNew = c && m.seq > c.lastSeq;
  const wasHidden = !!(c && c.hidden);
  if (isNew && c) c.hidden = false;
  // No badge frame comes with a message: unread is derived here, as the server does it (own
  // messages are read).
  if (isNew) {
    const prevLastSeq = c.lastSeq;
    c.lastSeq = m.seq;
    if (m.senderId === me()) {
      c.readSeq = Math.max(c.readSeq, m.seq);
      c.unread = 0;
      c.unreadMentions = 0;
      c.mentionSeqs.clear();
      pruneGone(c);
    } else {
      if (mentionsMe(m)) noteMention(c, m.seq, true);
      if (m.kind === 'deleted') c.gone.add(m.seq);
      const from = Math.max(prevLastSeq, c.readSeq); // seqs it moves lastSeq over, less tombstones
      c.unread += Math.max(0, m.seq - from) - goneIn(c, from, m.seq);
    }
    recountTotal();
  } else {
    rememberGone(c, m); // a replay or duplicate: the count already stands
  }
  if (m.senderId === me() && m.clientMsgId && pending.has(m.clientMsgId)) {
    confirmSend(m.clientMsgId, m);
    renderConvList();
    return;
  }
  // A conversation this page does not know (deleted for me, then written to again), or a
  // membership change: the list tells the rest.
  if (!c || m.kind === 'system') refreshListSoon();
  if (c) {
    c.lastSeq = Math.max(c.lastSeq, m.seq);
    c.activity = Math.max(c.activity, Date.parse(m.createdAt) || Date.now());
    c.typing.delete(m.senderId);
  }
  deliver(m);
  if (m.conversationId === shown.openId) {
    renderMessages();
    renderTyping();
  }
  if (isNew && m.senderId !== me() && !wasHidden) notifyDesktop(c, m);
  if (isNew && m.senderId !== me()) {
    announce(m.conversationId === shown.openId ? `${nameOf(m.senderId)}: ${m.body || attachmentLabel(firstAttachment(m)) || 'message deleted'}`
      : `New message from ${nameOf(m.senderId)}`);
  }
  renderConvList();
}

// applyPresenceList keeps the answer to a presence request for the users asked about.
export function applyPresenceList(asked, r) {
  const answered = new Set();
  for (const p of r.presence || []) { store.presence.set(p.userId, p); answered.add(p.userId); }
  // Left out: they hide their presence, or share no conversation any more.
  for (const u of asked) if (!answered.has(u)) store.presence.delete(u);
}

function onPresence(f) {
  if (!f.userId) return;
  if (f.online || f.lastSeen) store.presence.set(f.userId, f);
  else store.presence.delete(f.userId); // offline with no time: they now hide it
  if (dmPeer(openConv()) === f.userId) showConversation();
  renderGroupInfo();
}
