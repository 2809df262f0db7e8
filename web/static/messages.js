// Rendering the open conversation's messages from the store: the items of a window, their ticks,
// bodies, reactions and quotes, and the scroll position.

import { attemptSend, discardPending, pending, renderReplyBar } from './composer.js';
import { jumpTo, maybeLoadMore, nearBottom, replaceWindow } from './conversation.js';
import { flash, h, morph, reconcile, ui } from './dom.js';
import { attachmentLabel, filesOf, firstAttachment, renderTray } from './files.js';
import { MENTION_TOKEN, nameOf, systemText } from './names.js';
import { markVisibleRead, observeMessages, seenSeq } from './reads.js';
import {
  LONG_BODY_CHARS, LONG_BODY_LINES, PREVIEW_CHARS, PREVIEW_LINES, QUOTE_CHARS, dayKey, dayLabel,
  formatTime, me, openConv, openWindow, shown, store
} from './state.js';

export function renderMessages(scroll = {}) {
  const c = openConv();
  const w = openWindow();
  const sc = ui.scroller;
  if (!c || !w) return;
  const stick = shown.following;
  const anchor = scrollAnchor();
  const myId = me();

  const lastMine = lastOwnSeq(w);
  const items = [];
  const today = dayKey(new Date());
  let day = null;
  // A separator opens each day's messages; its key is the day, so each day has one.
  const startDay = (iso) => {
    const d = new Date(iso);
    const key = Number.isNaN(d.getTime()) ? day : dayKey(d);
    if (!key || key === day) return;
    day = key;
    const label = dayLabel(d);
    items.push({ key: `d${key}`, sig: `${label}|${today}`, build: () => dateItem(key, label) });
  };
  for (let s = w.lo; s <= w.hi; s++) {
    const m = w.bySeq.get(s);
    if (!m) continue;
    startDay(m.createdAt);
    if (shown.divider && shown.divider.convId === c.id && s === shown.divider.afterSeq + 1) {
      items.push({ key: 'divider', sig: 'divider', build: dividerItem });
    }
    const mine = m.senderId === myId;
    const status = mine ? sentStatus(c, m, s === lastMine) : null;
    const quote = m.replyTo && m.kind === 'text' ? quoteOf(w, m.replyTo, m.quote) : null;
    items.push({
      key: `s${s}`, sig: [m.kind, m.body, m.editedAt, reactionsSig(m), (m.attachments || []).length, status && status.sig, status && status.title, quote && quote.sig,
        m.kind === 'system' ? systemText(c, m) : nameOf(m.senderId)].join('|'),
      build: () => messageItem(c, m, status, quote),
      update: (e) => morph(e, messageItem(c, m, status, quote)),
    });
  }
  if (!w.hasAfter) {
    for (const p of pending.values()) {
      if (p.convId !== c.id) continue;
      startDay(p.createdAt);
      const quote = p.replyTo ? quoteOf(w, p.replyTo) : null;
      items.push({ key: `p${p.clientMsgId}`, sig: `${p.state}|${p.error || ''}|${quote ? quote.sig : ''}`, build: () => pendingItem(c, p, quote),
        update: (e) => morph(e, pendingItem(c, p, quote)) });
    }
  }
  reconcile(ui.list, items);
  ui.list.dataset.firstSeq = String(w.bySeq.size ? w.lo : 0);
  ui.list.dataset.lastSeq = String(w.bySeq.size ? w.hi : 0);
  ui.list.dataset.hasBefore = String(w.hasBefore);
  ui.list.dataset.hasAfter = String(w.hasAfter);

  if (scroll.toSeq) {
    // The message, or what opens it: the new-messages line, or its day's separator.
    const msg = ui.list.querySelector(`:scope > li[data-seq="${scroll.toSeq}"]`);
    const before = msg && msg.previousElementSibling;
    const opener = scroll.divider ? ui.list.querySelector('[data-key="divider"]')
      : scroll.dayStart && before && before.classList.contains('day') ? before : null;
    const e = opener || msg;
    if (e) {
      const atTop = scroll.divider || scroll.dayStart;
      sc.scrollTop += e.getBoundingClientRect().top - sc.getBoundingClientRect().top - (atTop ? 4 : sc.clientHeight / 3);
      if (scroll.highlight && msg) flash(msg);
    }
    shown.following = nearBottom();
  } else if (scroll.top) {
    sc.scrollTop = 0;
    shown.following = nearBottom();
  } else if (scroll.bottom) {
    sc.scrollTop = sc.scrollHeight;
    shown.following = true;
  } else if (stick && !w.hasAfter) {
    followNewest(c);
  } else if (anchor && anchor.e.isConnected) {
    sc.scrollTop += anchor.e.getBoundingClientRect().top - anchor.top;
  }
  observeMessages();
  updateCue();
  renderReplyBar(); // the answered message may have been loaded or deleted meanwhile
  renderTray(); // the open conversation's uploads
  // After layout, look at what the user sees: mark it read, and fetch more if an edge that has
  // more is in view (a short page, or a gap found after a reconnect scrolls nothing).
  setTimeout(() => { maybeLoadMore(); markVisibleRead(); }, 0);
}

// followNewest keeps a conversation that was at its newest message there, but never scrolls past
// a message the user has not had on screen: after a long outage the replayed backlog stops with
// its first unseen message at the top, and the cue counts the rest.
function followNewest(c) {
  const sc = ui.scroller;
  let top = sc.scrollHeight - sc.clientHeight;
  const seen = seenSeq(c);
  for (const e of ui.list.querySelectorAll('li[data-seq]')) {
    if (Number(e.dataset.seq) <= seen || e.dataset.sender === me()) continue;
    top = Math.min(top, sc.scrollTop + e.getBoundingClientRect().top - sc.getBoundingClientRect().top - 8);
    break;
  }
  if (top > sc.scrollTop) sc.scrollTop = top;
}

// updateCue shows, over the bottom of the messages, how many arrived below what the user has seen
// ("3 new messages"), or "Jump to latest" when the window does not reach the newest message.
export function updateCue() {
  const c = openConv();
  const w = openWindow();
  if (!c || !w) { ui.jumpLatest.hidden = true; return; }
  const fresh = Math.max(0, c.lastSeq - seenSeq(c));
  const hide = !w.hasAfter && (fresh === 0 || nearBottom());
  const text = fresh > 0 ? `${fresh} new message${fresh === 1 ? '' : 's'} ↓` : 'Jump to latest ↓';
  if (ui.jumpLatest.textContent !== text) ui.jumpLatest.textContent = text;
  ui.jumpLatest.hidden = hide;
}

export function jumpToLatest() {
  const c = openConv();
  const w = openWindow();
  if (!c || !w) return;
  shown.following = true;
  if (w.hasAfter) replaceWindow(c.id, {}, { bottom: true });
  else ui.scroller.scrollTop = ui.scroller.scrollHeight;
}

// scrollAnchor is the first item in view that keeps its place among its neighbours; a day's
// separator does not (it moves up when older messages of that day are loaded above it).
function scrollAnchor() {
  const top = ui.scroller.getBoundingClientRect().top;
  for (const e of ui.list.children) {
    if (e.classList.contains('day')) continue;
    const r = e.getBoundingClientRect();
    if (r.bottom > top) return { e, top: r.top };
  }
  return null;
}

// firstOwnSeq is the oldest own text message shown at or after seq from; 0 for none.
export function firstOwnSeq(w, from = w.lo) {
  for (let s = Math.max(w.lo, from); s <= w.hi; s++) {
    const m = w.bySeq.get(s);
    if (m && m.senderId === me() && m.kind === 'text') return s;
  }
  return 0;
}

export function lastOwnSeq(w) {
  for (let s = w.hi; s >= w.lo; s--) {
    const m = w.bySeq.get(s);
    if (m && m.senderId === me() && m.kind === 'text') return s;
  }
  return 0;
}

// groupReadBy says who has read an own message of a group: exactly, with their ids, from the
// readers' positions (groups of up to 32); else at least the count of the next message asked about
// (a cursor only moves forward, so whoever read a message read every one before it).
function groupReadBy(c, seq) {
  const g = c.groupReads;
  if (!g || seq < g.from) return { n: 0, readers: [] };
  if (g.readers) {
    const readers = [...g.readers].filter(([, readSeq]) => readSeq >= seq).map(([u]) => u);
    return { n: readers.length, readers };
  }
  const asked = g.counts.find(([s]) => s >= seq);
  return { n: asked ? asked[1] : 0, readers: [] };
}

// sentStatus says what the sender sees under a confirmed message: ticks in a DM; in a group, a
// read tick under every own message someone has read and "Read by N" under the newest.
function sentStatus(c, m, isLast) {
  if (c.kind === 'dm') {
    const read = m.seq <= c.peerReadSeq;
    const delivered = read || m.seq <= c.peerDeliveredSeq;
    if (read) return { sig: 'read', tick: 'read', read, delivered, text: '✓✓', label: 'Read' };
    if (delivered) return { sig: 'delivered', tick: 'delivered', read, delivered, text: '✓✓', label: 'Delivered' };
    return { sig: 'sent', tick: 'sent', read, delivered, text: '✓', label: 'Sent' };
  }
  const { n, readers } = groupReadBy(c, m.seq);
  if (n > 0) {
    return { sig: `by${n}${isLast ? 'last' : ''}`, tick: 'read', readBy: n, text: isLast ? `Read by ${n}` : '✓✓', label: `Read by ${n}`, title: readers.map(nameOf).join(', ') };
  }
  return { sig: 'sent', tick: 'sent', text: '✓', label: 'Sent' };
}

// dateItem is a day's separator: a list item with no seq and no state, so not a message. It
// stays a list item (a list holds only those), which reads its day.
function dateItem(key, label) {
  return h('li', { class: 'day', 'data-day': key }, h('span', {}, label));
}

function dividerItem() {
  return h('li', { class: 'divider' }, h('span', {}, 'New messages'));
}

// bodyOf is a message's text, laid out in the direction of its own script (dir="auto": Hebrew
// and Arabic run right to left). A long body is collapsed behind "Show more", and only its
// preview is laid out until then: a 16 KB body costs layout on every change of the pane.
function bodyOf(m, convId = m.conversationId) {
  if (m.kind === 'deleted') return h('p', { class: 'body deleted' }, 'This message was deleted.');
  const text = m.body || '';
  const preview = previewOf(text);
  if (preview === null) return h('p', { class: 'body', dir: 'auto' }, withMentions(text, m));
  const key = `${convId}:${m.seq}`;
  // The toggle's listener holds this text: an edit brings a new body and toggle, not a morph.
  const mark = `${text.length}:${hashText(text)}`;
  const body = h('p', { class: 'body', dir: 'auto', id: `body-${m.seq}`, 'data-replace': mark });
  const toggle = h('button', { type: 'button', class: 'show-more link', 'aria-controls': body.id, 'data-replace': mark });
  const show = (expanded) => {
    body.replaceChildren(withMentions(expanded ? text : preview, m));
    toggle.textContent = expanded ? 'Show less' : 'Show more';
    toggle.setAttribute('aria-expanded', String(expanded));
  };
  toggle.addEventListener('click', () => {
    const expanded = !shown.expanded.has(key);
    if (expanded) shown.expanded.add(key); else shown.expanded.delete(key);
    show(expanded); // in place, so focus stays on the toggle
  });
  show(shown.expanded.has(key));
  const frag = document.createDocumentFragment();
  frag.append(body, toggle);
  return frag;
}

// hashText is a 32-bit FNV-1a hash of a text, to tell two texts apart without keeping either.
function hashText(text) {
  let x = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) x = Math.imul(x ^ text.charCodeAt(i), 0x01000193);
  return (x >>> 0).toString(36);
}

// linkify turns the http and https addresses in a text into links, built as DOM nodes (never
// HTML): the rest stays text, and no other scheme (javascript:, data:) ever becomes a link.
// Links open in a new tab without telling it where they came from (noopener noreferrer).
const URL_PATTERN = /\bhttps?:\/\/[^\s<>"\u2026]+/gi;
function linkify(text) {
  const frag = document.createDocumentFragment();
  let last = 0;
  for (const match of text.matchAll(URL_PATTERN)) {
    const raw = trimUrlEnd(match[0]);
    const href = safeHref(raw);
    if (!href) continue;
    frag.append(text.slice(last, match.index),
      h('a', { href, target: '_blank', rel: 'noopener noreferrer' }, raw));
    last = match.index + raw.length;
  }
  frag.append(text.slice(last));
  return frag;
}

// withMentions shows the tokens of the members m mentions (docs/PROTOCOL.md, Mentions) as their
// current display names, the viewer's own highlighted, and the rest of the text as linkify does;
// a token of anyone else stays text.
function withMentions(text, m) {
  const mentioned = m.mentions || [];
  if (!mentioned.length) return linkify(text);
  const frag = document.createDocumentFragment();
  let last = 0;
  for (const match of text.matchAll(MENTION_TOKEN)) {
    if (!mentioned.includes(match[1])) continue;
    frag.append(linkify(text.slice(last, match.index)), h('span', {
      class: match[1] === me() ? 'mention mention-me' : 'mention', 'data-user-id': match[1],
    }, `@${nameOf(match[1])}`));
    last = match.index + match[0].length;
  }
  frag.append(linkify(text.slice(last)));
  return frag;
}

// trimUrlEnd leaves the punctuation that ends a sentence out of an address ("see https://x.org.")
// and a closing bracket that has no opening one inside it ("(https://x.org)").
function trimUrlEnd(raw) {
  let url = raw;
  for (;;) {
    const last = url.slice(-1);
    if ('.,;:!?\'"'.includes(last)) { url = url.slice(0, -1); continue; }
    const open = { ')': '(', ']': '[', '}': '{' }[last];
    if (open && url.split(open).length < url.split(last).length) { url = url.slice(0, -1); continue; }
    return url;
  }
}

function safeHref(raw) {
  try {
    const u = new URL(raw);
    return u.protocol === 'http:' || u.protocol === 'https:' ? u.href : null;
  } catch {
    return null;
  }
}

// previewOf is the start of a long text, cut at a line end or PREVIEW_CHARS; null for a text
// short enough to show whole.
function previewOf(text) {
  let lines = 0;
  let cut = -1;
  for (let i = text.indexOf('\n'); i !== -1; i = text.indexOf('\n', i + 1)) {
    lines++;
    if (lines === PREVIEW_LINES) cut = i;
    if (lines >= LONG_BODY_LINES) break;
  }
  if (text.length <= LONG_BODY_CHARS && lines < LONG_BODY_LINES) return null;
  let end = Math.min(text.length, PREVIEW_CHARS);
  if (cut !== -1 && cut < end) end = cut;
  return `${text.slice(0, end).trimEnd()}…`;
}

function messageItem(c, m, status, quote) {
  const mine = m.senderId === me();
  if (m.kind === 'system') {
    return h('li', { class: 'msg system', 'data-seq': m.seq }, h('p', { class: 'body', dir: 'auto' }, systemText(c, m)));
  }
  const attrs = {
    class: `msg ${mine ? 'mine' : 'theirs'}`, 'data-seq': m.seq, 'data-sender': m.senderId,
    'data-state': 'sent', 'data-client-msg-id': m.clientMsgId,
  };
  if (status && status.read !== undefined) attrs['data-read'] = String(status.read);
  if (status && status.delivered !== undefined) attrs['data-delivered'] = String(status.delivered);
  if (status && status.readBy !== undefined) attrs['data-read-by'] = String(status.readBy);
  const who = mine ? 'your message' : `message from ${nameOf(m.senderId)}`;
  // A tombstone has nothing left to answer or delete: no menu.
  const menuButton = m.kind === 'text' ? h('button', {
    type: 'button', class: 'msg-actions', 'aria-haspopup': 'menu', 'aria-expanded': 'false',
    'aria-controls': 'msg-menu', 'aria-label': `Options for ${who}`,
  }, h('span', { 'aria-hidden': 'true' }, '⋯')) : null;
  const bubble = h('div', { class: 'bubble' },
    h('span', { class: mine || c.kind === 'dm' ? 'sr-only' : 'sender' }, mine ? 'You' : nameOf(m.senderId)),
    quote ? quoteItem(quote) : null,
    bodyOf(m, c.id),
    filesOf(m),
    m.kind === 'text' ? reactionChips(m) : null,
    h('span', { class: 'meta' },
      m.editedAt && m.kind === 'text' ? h('span', { class: 'edited', title: `Edited ${formatTime(m.editedAt)}` }, 'edited') : null,
      h('time', { datetime: m.createdAt }, formatTime(m.createdAt)),
      status ? h('span', { class: `tick ${status.tick}`, role: 'img', 'aria-label': status.label, title: status.title || status.label }, status.text) : null));
  // The button sits beside the bubble, on the side facing the middle of the pane.
  return mine ? h('li', attrs, menuButton, bubble) : h('li', attrs, bubble, menuButton);
}

// reactionsSig changes whenever what the chips show does.
const reactionsSig = (m) => (m.reactions || []).map((r) => `${r.emoji}${r.count}${r.me ? '*' : ''}`).join(',');

// reactionChips are the reactions under a message: "👍 2" per emoji, the ones this user used
// pressed (aria-pressed) and outlined; a click adds or takes away this user's.
function reactionChips(m) {
  const list = (m.reactions || []).filter((r) => r.count > 0);
  if (!list.length) return null;
  return h('div', { class: 'reactions', role: 'group', 'aria-label': 'Reactions' },
    ...list.map((r) => h('button', {
      type: 'button', class: `chip${r.me ? ' me' : ''}`, 'data-emoji': r.emoji, 'aria-pressed': String(!!r.me),
      'aria-label': `${r.emoji} ${r.count}${r.me ? ', you reacted; press to take yours away' : '; press to react too'}`,
    }, `${r.emoji} ${r.count}`)));
}

function pendingItem(c, p, quote) {
  const failed = p.state === 'failed';
  return h('li', { class: `msg mine ${p.state}`, 'data-state': p.state, 'data-client-msg-id': p.clientMsgId },
    h('div', { class: 'bubble' },
      h('span', { class: 'sr-only' }, 'You'),
      quote ? quoteItem(quote) : null,
      h('p', { class: 'body', dir: 'auto' }, previewOf(p.body) ?? p.body),
      p.attachments ? filesOf(p) : null,
      h('span', { class: 'meta' }, failed
        ? h('span', { class: 'fail', role: 'alert' }, p.error || 'Not sent.')
        : h('span', { class: 'tick sending', role: 'img', 'aria-label': p.state === 'queued' ? 'Waiting to send' : 'Sending' }, '…')),
      failed ? h('span', { class: 'actions' },
        p.retryable ? h('button', { type: 'button', class: 'retry', onclick: () => attemptSend(p) }, 'Retry') : null,
        h('button', { type: 'button', class: 'discard link', onclick: () => discardPending(p) }, 'Discard')) : null));
}

// quoteOf is what a reply shows of the message it answers, from the messages the page holds:
// its sender and the start of its text; "a message" when it is not loaded, "deleted message"
// for a tombstone. sig changes whenever what it shows does.
// The server's quote (serverQuote, on the reply itself) is used when there is one: it needs
// nothing loaded; a deletion this page has seen since still shows it as deleted.
export function quoteOf(w, seq, serverQuote) {
  const m = w && w.bySeq.get(seq);
  const c = store.convs.get(shown.openId);
  let q;
  if (serverQuote && (serverQuote.deleted || (c && c.deletedSeqs.has(seq)) || (m && m.kind === 'deleted'))) {
    q = { seq, sender: '', text: 'deleted message', state: 'deleted' };
  } else if (serverQuote) {
    const text = (serverQuote.body || attachmentLabel(serverQuote.attachment)).replace(/\s+/g, ' ').trim();
    q = { seq, sender: serverQuote.senderId === me() ? 'You' : nameOf(serverQuote.senderId), state: 'loaded',
      text: text.length > QUOTE_CHARS ? `${text.slice(0, QUOTE_CHARS).trimEnd()}…` : text };
  } else if (!m) q = { seq, sender: '', text: 'a message', state: 'missing' };
  else if (m.kind === 'deleted') q = { seq, sender: '', text: 'deleted message', state: 'deleted' };
  else {
    const text = (m.body || attachmentLabel(firstAttachment(m))).replace(/\s+/g, ' ').trim();
    q = { seq, sender: m.senderId === me() ? 'You' : nameOf(m.senderId), state: 'loaded',
      text: text.length > QUOTE_CHARS ? `${text.slice(0, QUOTE_CHARS).trimEnd()}…` : text };
  }
  q.sig = `${q.state}:${q.sender}:${q.text}`;
  return q;
}

function quoteItem(q) {
  const label = q.state === 'loaded' ? `Reply to ${q.sender}: ${q.text}. Show the message` : `Reply to ${q.text}. Show the message`;
  return h('button', { type: 'button', class: `quote ${q.state}`, 'data-seq': q.seq, 'aria-label': label },
    q.sender ? h('span', { class: 'quote-sender' }, q.sender) : null,
    h('span', { class: 'quote-text', dir: 'auto' }, q.text));
}

// jumpToMessage brings a replied-to message into view and gives it the focus; one outside the
// loaded window is loaded around it first.
export function jumpToMessage(seq) {
  const e = ui.list.querySelector(`li[data-seq="${seq}"]`);
  if (!e) { jumpTo(seq); return; }
  const sc = ui.scroller;
  sc.scrollTop += e.getBoundingClientRect().top - sc.getBoundingClientRect().top - sc.clientHeight / 3;
  e.tabIndex = -1;
  e.focus({ preventScroll: true });
  flash(e);
}
