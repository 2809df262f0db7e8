// The conversation list, the tab's title and icon, and starting conversations (DM, group).

import { request } from './connection.js';
import { openConversation, showConversation } from './conversation.js';
import { applyConversationList, onConversation } from './dispatch.js';
import { h, reconcile, ui } from './dom.js';
import { attachmentLabel } from './files.js';
import { PICK_SOMEONE, dmFinder, groupFinder, groupPicks, membersTyped } from './finder.js';
import { renderGroupInfo } from './groupinfo.js';
import { convTitle, errorText, mentionsAsNames, nameOf, systemText } from './names.js';
import { FAVICON_PX, dayLabel, initial, me, shown, store } from './state.js';

// ---- Conversation list -----------------------------------------------------------------------

export function updateTitle() {
  document.title = store.total > 0 ? `(${store.total}) chatd` : 'chatd';
  drawFavicon(store.total);
}

// drawFavicon draws the tab's icon on a canvas: the page's blue square, with a red badge of the
// total unread when there is any ("99+" past 99). The CSP allows data: images, and no file is
// fetched.
let faviconDrawn = -1;
function drawFavicon(total) {
  const n = store.auth ? total : 0;
  if (n === faviconDrawn || !ui.favicon) return;
  const canvas = document.createElement('canvas');
  canvas.width = FAVICON_PX;
  canvas.height = FAVICON_PX;
  const g = canvas.getContext('2d');
  if (!g) return;
  const s = FAVICON_PX;
  g.fillStyle = '#2257d6';
  g.beginPath();
  g.roundRect(s * 0.04, s * 0.04, s * 0.92, s * 0.92, s * 0.2);
  g.fill();
  g.fillStyle = '#ffffff';
  g.font = `bold ${s * 0.62}px system-ui, sans-serif`;
  g.textAlign = 'center';
  g.textBaseline = 'middle';
  g.fillText('c', s * 0.42, s * 0.5);
  if (n > 0) {
    const text = n > 99 ? '99+' : String(n);
    g.fillStyle = '#d92d20';
    g.beginPath();
    g.arc(s * 0.7, s * 0.3, s * 0.3, 0, Math.PI * 2);
    g.fill();
    g.fillStyle = '#ffffff';
    g.font = `bold ${s * (text.length === 1 ? 0.42 : text.length === 2 ? 0.34 : 0.24)}px system-ui, sans-serif`;
    g.fillText(text, s * 0.7, s * 0.32);
  }
  ui.favicon.href = canvas.toDataURL('image/png');
  ui.favicon.dataset.unread = String(n); // what it shows, for tests and tools
  faviconDrawn = n;
}

let listTimer = null;
export function refreshListSoon() {
  clearTimeout(listTimer);
  listTimer = setTimeout(async () => {
    try {
      const r = await request({ type: 'list_conversations' });
      applyConversationList(r.conversations || []);
      if (shown.openId) showConversation();
    } catch { /* the next sync brings the list */ }
  }, 200);
}

export function typers(c) {
  const now = Date.now();
  return [...c.typing].filter(([, until]) => until > now).map(([u]) => u);
}

// openDM opens a DM from the "Message a user" box: with the person picked in its list of
// people found by name, else with the one whose name is exactly what was typed, else with the
// user whose id was typed.
export async function openDM(ev) {
  ev.preventDefault();
  ui.sidebarError.textContent = '';
  if (!ui.dmUser.value.trim()) return;
  const peer = dmFinder.chosen();
  if (!peer) { ui.sidebarError.textContent = PICK_SOMEONE; return; }
  await openDMWith(peer);
}

export async function openDMWith(peer) {
  if (peer === me()) { ui.sidebarError.textContent = 'That is you: pick another user.'; return; }
  try {
    const r = await request({ type: 'open_dm', userId: peer });
    onConversation(r.conversation);
    ui.dmUser.value = '';
    dmFinder.close();
    openConversation(r.conversation.id, { focus: true });
  } catch (err) {
    // not_found is also what a user someone blocks hears about them (PROTOCOL.md, block_user):
    // the page says no more than the server does.
    ui.sidebarError.textContent = err.code === 'not_found' ? `You cannot message ${nameOf(peer)}.` : errorText(err);
  }
}

export async function createGroup(ev) {
  ev.preventDefault();
  ui.sidebarError.textContent = '';
  const members = membersTyped(groupPicks, groupFinder, ui.groupMembers);
  if (!members.length) { ui.sidebarError.textContent = PICK_SOMEONE; ui.groupMembers.focus(); return; }
  try {
    const r = await request({ type: 'create_group', name: ui.groupName.value.trim(), members });
    onConversation(r.conversation);
    ui.groupName.value = '';
    ui.groupMembers.value = '';
    groupPicks.clear();
    ui.groupDetails.open = false;
    openConversation(r.conversation.id, { focus: true });
  } catch (err) {
    ui.sidebarError.textContent = errorText(err);
  }
}

// renderConvList updates the list in place, so focus stays on the item a keyboard user is on.
export function renderConvList() {
  renderGroupInfo(); // members change with the list (a join, a leave, a removal)
  const convs = [...store.convs.values()].filter((c) => c.lastSeq >= c.firstSeq || c.lastSeq === 0).sort((a, b) => b.activity - a.activity || (a.id < b.id ? -1 : 1));
  ui.convEmpty.hidden = convs.length > 0;
  renderBackBadge();
  reconcile(ui.convList, convs.map((c) => ({
    key: c.id,
    sig: [convTitle(c), c.unread, c.id === shown.openId, typers(c).length, c.kind, c.members.length,
      previewText(c), c.last ? c.last.createdAt : '', c.notify, c.unreadMentions].join('|'),
    build: () => {
      const li = h('li', { class: 'conv-item' }, h('button', {
        type: 'button', class: 'conv', 'data-conv-id': c.id,
        onclick: () => openConversation(c.id, { focus: true }),
        onkeydown: (e) => moveInList(e),
      }));
      fillConvItem(li, c, c.notify === 'nothing');
      return li;
    },
    update: (li) => fillConvItem(li, c, c.notify === 'nothing'),
  })));
}

// renderBackBadge counts the unread messages of the other conversations on the back button: on a
// phone the open conversation covers the list, and this is where activity elsewhere shows.
function renderBackBadge() {
  let n = 0;
  for (const c of store.convs.values()) if (c.id !== shown.openId) n += c.unread;
  const text = n > 999 ? '999+' : String(n);
  ui.backBadge.hidden = n === 0;
  if (ui.backBadge.textContent !== text) ui.backBadge.textContent = text;
  ui.back.setAttribute('aria-label', n > 0 ? `Back to conversations, ${n} unread` : 'Back to conversations');
}

// fillConvItem updates a list entry in place: the button stays the same element, so focus,
// hover and a click in progress survive a badge change.
function fillConvItem(li, c, muted) {
  const title = convTitle(c);
  const typing = typers(c).length > 0;
  const sub = typing ? 'typing…' : previewText(c) || (c.kind === 'group' ? `Group · ${c.members.length} members` : 'Direct message');
  const time = c.last ? listTime(c.last.createdAt) : '';
  const badge = c.unread > 999 ? '999+' : String(c.unread);
  const button = li.firstElementChild;
  // The name holds the words the entry shows, in their order (WCAG 2.5.3, label in name): the
  // name, the newest message's time, the preview and the unread count; the spaces between the
  // parts keep those words apart in the visible text too. "muted" is said, not shown as a word.
  const mentions = c.unreadMentions > 0 ? `@ ${c.unreadMentions} mentioning you` : '';
  button.setAttribute('aria-label', [title, time, sub, muted ? 'muted' : '', c.unread > 0 ? `${badge} unread` : '', mentions].filter(Boolean).join(', '));
  if (c.id === shown.openId) button.setAttribute('aria-current', 'true');
  else button.removeAttribute('aria-current');
  button.replaceChildren(
    // The initial and the muted mark are drawn by CSS (attr(data-initial), ::before): as text
    // they would count as part of the button's visible label, which then would not match its name.
    h('span', { class: `avatar ${c.kind}`, 'aria-hidden': 'true', 'data-initial': initial(title) }),
    h('span', { class: 'conv-text' },
      h('span', { class: 'conv-line' },
        h('span', { class: 'conv-name', dir: 'auto' }, title),
        muted ? h('span', { class: 'conv-muted', title: 'Notifications muted', 'aria-hidden': 'true' }) : null,
        ...(time ? [' ', h('time', { class: 'conv-time muted', datetime: c.last.createdAt }, time)] : [])),
      ' ',
      h('span', { class: 'conv-line' },
        h('span', { class: `conv-sub muted${c.last && !typing ? ' preview' : ''}`, dir: 'auto' }, sub),
        ...(c.unread > 0 ? [' ', h('span', { class: 'badge', 'aria-hidden': 'true' }, badge)] : []),
        ...(c.unreadMentions > 0 ? [' ', h('span', { class: 'badge mention-badge', 'aria-hidden': 'true', title: 'Mentions you' }, '@')] : []))));
}

// previewText is a list entry's second line: "<sender>: <text>" of the newest message ("You"
// for your own), a system message's text, or "This message was deleted"; '' when none is known.
function previewText(c) {
  const m = c.last;
  if (!m) return '';
  if (m.kind === 'deleted') return 'This message was deleted';
  if (m.kind === 'system') return systemText(c, m);
  return `${m.senderId === me() ? 'You' : nameOf(m.senderId)}: ${mentionsAsNames(m.body || '') || attachmentLabel(m.attachment)}`;
}

// listTime says when the newest message came: the time today, "Yesterday", the weekday within
// a week, the date before that.
function listTime(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  const label = dayLabel(d);
  if (label === 'Today') return d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  if (label === 'Yesterday' || !/\d/.test(label)) return label;
  return d.toLocaleDateString([], { day: 'numeric', month: 'short' });
}

function moveInList(e) {
  if (e.key !== 'ArrowDown' && e.key !== 'ArrowUp') return;
  const buttons = [...ui.convList.querySelectorAll('button.conv')];
  const i = buttons.indexOf(e.currentTarget) + (e.key === 'ArrowDown' ? 1 : -1);
  if (buttons[i]) { buttons[i].focus(); e.preventDefault(); }
}
