// Running a group (issue 37): roles as the page shows them, the pin bar, the composer's gate
// (announcement groups, mutes, the slow-mode countdown), the group-settings part of group info
// (name, topic, who may post, slow mode, invite links, reports), reporting a message, and the
// invite link's join page (#/join/<token>). The server's conversation owner checks every rule;
// the page only offers what the user's role allows and shows refusals in the server's words.

import { request } from './connection.js';
import { openConversation } from './conversation.js';
import { onConversation } from './dispatch.js';
import { announce, h, reconcile, ui } from './dom.js';
import { confirmAction, showNotice } from './menus.js';
import { jumpToMessage } from './messages.js';
import { convTitle, failureText, nameOf } from './names.js';
import { me, openConv, openWindow, store } from './state.js';

// SLOW_TICK_MS is how often the slow-mode countdown is redrawn: once a second, as it counts.
const SLOW_TICK_MS = 1000;
// SLOW_MODE_CHOICES are the slow-mode intervals the settings offer, in seconds (0: off).
const SLOW_MODE_CHOICES = [0, 10, 30, 60, 300, 900, 3600];

// ---- Roles -----------------------------------------------------------------------------------

// roleOf is u's role in group c: 'owner', 'admin' or 'member' ('' in a DM).
export function roleOf(c, u) {
  const g = c && c.group;
  if (!g) return '';
  if (g.owner === u) return 'owner';
  return (g.admins || []).includes(u) ? 'admin' : 'member';
}

// runsGroup says whether this user is the owner or an admin of c.
export const runsGroup = (c) => ['owner', 'admin'].includes(roleOf(c, me()));

// canRemove says whether this user may remove (or ban, or mute) member u of c: admins remove
// plain members, the owner admins too, nobody the owner.
export function canRemove(c, u) {
  const mine = roleOf(c, me());
  const theirs = roleOf(c, u);
  return u !== me() && theirs !== 'owner' && (mine === 'owner' || (mine === 'admin' && theirs === 'member'));
}

// moderate sends one moderate action of group c; a refusal is shown in the group-info panel
// when it is open, else as a notice.
async function moderate(c, fields, what) {
  ui.groupInfoError.textContent = '';
  try {
    return await request({ type: 'moderate', conversationId: c.id, ...fields });
  } catch (err) {
    const text = failureText(`Could not ${what}`, err);
    if (ui.groupInfo.open) ui.groupInfoError.textContent = text; else showNotice(text);
    return null;
  }
}

// setRole promotes or demotes member u (the owner's buttons in the member list).
export async function setRole(c, u, admin) {
  if (await moderate(c, { action: admin ? 'promote' : 'demote', userId: u }, admin ? `make ${nameOf(u)} an admin` : `make ${nameOf(u)} a member`)) {
    announce(admin ? `${nameOf(u)} is an admin` : `${nameOf(u)} is a member`);
  }
}

// MUTE_SECONDS is how long the member list's Mute silences a member: an hour, a cooling-off
// rather than a sentence (chatctl and the protocol take any length).
const MUTE_SECONDS = 3600;

// mutedUntil is when member u's mute in c ends ('' when not muted).
export function mutedUntil(c, u) {
  const m = (c.group?.muted || []).find((x) => x.userId === u);
  return m && Date.parse(m.until) > Date.now() ? m.until : '';
}

// moderationButtons are Mute (or Unmute) and Ban for member u of c, when the user may: plain
// members only (an admin is never muted; the owner bans an admin by removing them first).
export function moderationButtons(c, u) {
  if (!canRemove(c, u) || roleOf(c, u) !== 'member') return [];
  const until = mutedUntil(c, u);
  return [
    h('button', { type: 'button', class: 'link mute-member', onclick: () => mute(c, u, !until) },
      until ? 'Unmute' : 'Mute 1 h'),
    h('button', { type: 'button', class: 'link danger ban-member', 'aria-label': `Ban ${nameOf(u)} from the group`, onclick: () => ban(c, u) }, 'Ban'),
  ];
}

async function mute(c, u, on) {
  const fields = on ? { action: 'mute', userId: u, seconds: MUTE_SECONDS } : { action: 'unmute', userId: u };
  if (await moderate(c, fields, on ? `mute ${nameOf(u)}` : `unmute ${nameOf(u)}`)) announce(on ? `${nameOf(u)} is muted for an hour` : `${nameOf(u)} may send again`);
}

async function ban(c, u) {
  const ok = await confirmAction({
    title: `Ban ${nameOf(u)}?`,
    text: `${nameOf(u)} leaves ${convTitle(c)} and cannot be added back or join by link until unbanned.`,
    ok: 'Ban',
  });
  if (ok && await moderate(c, { action: 'ban', userId: u }, `ban ${nameOf(u)}`)) announce(`${nameOf(u)} is banned`);
}

async function unban(c, u) {
  if (await moderate(c, { action: 'unban', userId: u }, `unban ${nameOf(u)}`)) announce(`${nameOf(u)} may be added again`);
}

// ---- Pin bar and composer gate ---------------------------------------------------------------

// pinIndex is which pin the bar shows, counted from the newest: each click jumps to the pin
// shown and the bar moves on to the one before it.
let pinIndex = 0;
let pinConv = '';

export function renderGroupState() {
  renderPinBar();
  renderGate();
  if (ui.groupInfo.open) renderGroupAdmin();
}

function renderPinBar() {
  const c = openConv();
  const pins = (c && c.group && c.group.pins) || [];
  ui.pinBar.hidden = pins.length === 0;
  if (!pins.length) return;
  if (pinConv !== c.id) { pinConv = c.id; pinIndex = 0; }
  pinIndex %= pins.length;
  const seq = pins[pins.length - 1 - pinIndex];
  const m = openWindow()?.bySeq.get(seq);
  const text = m && m.kind === 'text' ? m.body.replace(/\s+/g, ' ').trim() : `Message ${seq}`;
  ui.pinButton.dataset.seq = String(seq);
  ui.pinLabel.textContent = pins.length > 1 ? `Pinned ${pinIndex + 1} of ${pins.length}` : 'Pinned';
  ui.pinText.textContent = text;
  ui.pinButton.setAttribute('aria-label', `Pinned message: ${text}. Go to it.`);
}

// togglePin pins message seq of conversation convId, or unpins it if it is pinned (admins).
export async function togglePin(convId, seq) {
  const c = store.convs.get(convId);
  if (!c) return;
  const pinned = (c.group?.pins || []).includes(seq);
  if (await moderate(c, { action: pinned ? 'unpin' : 'pin', seq }, pinned ? 'unpin the message' : 'pin the message')) {
    announce(pinned ? 'Message unpinned' : 'Message pinned');
  }
}

// jumpToPin takes the user to the pinned message the bar shows, then shows the one before it.
export function jumpToPin() {
  const seq = Number(ui.pinButton.dataset.seq);
  if (!seq) return;
  jumpToMessage(seq);
  pinIndex++;
  renderPinBar();
}

// slowUntil maps a conversation to when this user may send again in slow mode (ms since the epoch).
const slowUntil = new Map();
let slowTimer = null;

// sendGate is why this user cannot send in c now ('' when they can).
export function sendGate(c) {
  const g = c && c.group;
  if (!g || runsGroup(c)) return '';
  if (g.announcement) return 'Only admins can post in this group.';
  const mute = (g.muted || []).find((x) => x.userId === me());
  if (mute && Date.parse(mute.until) > Date.now()) return `You are muted in this group until ${new Date(mute.until).toLocaleTimeString()}.`;
  const left = Math.ceil(((slowUntil.get(c.id) || 0) - Date.now()) / 1000);
  if (left > 0) return `Slow mode: you can send again in ${left} s.`;
  return '';
}

function renderGate() {
  const c = openConv();
  const why = sendGate(c);
  if (ui.composerGate.textContent !== why) ui.composerGate.textContent = why;
  ui.composerGate.hidden = !why;
  const closed = !!why && !why.startsWith('Slow mode');
  ui.input.disabled = closed; // a member may still write a draft while slow mode counts down
  ui.send.disabled = !!why;
  // Redrawn every second while a countdown runs or a mute lasts, so the composer opens when it ends.
  const counting = [...slowUntil.values()].some((t) => t > Date.now()) || why.startsWith('You are muted');
  if (counting && !slowTimer) slowTimer = setInterval(renderGate, SLOW_TICK_MS);
  if (!counting && slowTimer) { clearInterval(slowTimer); slowTimer = null; }
}

// noteSent starts the slow-mode countdown after this user's message in c, or after a slow-mode
// refusal (rate_limited with retryAfterMs).
export function noteSent(convId, err) {
  const c = openConv()?.id === convId ? openConv() : null;
  const g = c && c.group;
  if (err && err.code === 'rate_limited' && err.retryAfterMs > 0 && g && g.slowModeSeconds) {
    slowUntil.set(convId, Date.now() + err.retryAfterMs);
  } else if (!err && g && g.slowModeSeconds > 0 && !runsGroup(c)) {
    slowUntil.set(convId, Date.now() + g.slowModeSeconds * 1000);
  } else {
    return;
  }
  renderGate();
}

// ---- Group settings in group info ------------------------------------------------------------

// renderGroupAdmin fills the group-settings part of the open group-info panel: the topic for
// everyone; for admins the settings form, invite links and reports, read from the server.
export function renderGroupAdmin() {
  const c = openConv();
  const g = c && c.group;
  ui.groupTopic.textContent = g && g.topic ? `Topic: ${g.topic}` : '';
  ui.groupTopic.hidden = !(g && g.topic);
  const admin = runsGroup(c);
  ui.groupAdmin.hidden = !admin;
  if (!admin) return;
  const banned = g.banned || [];
  ui.bannedEmpty.hidden = banned.length > 0;
  reconcile(ui.bannedList, banned.map((u) => ({
    key: u,
    sig: nameOf(u),
    build: () => h('li', { class: 'member', 'data-user': u }, h('span', { class: 'member-name', dir: 'auto' }, nameOf(u)),
      h('button', { type: 'button', class: 'link unban', 'aria-label': `Unban ${nameOf(u)}`, onclick: () => unban(c, u) }, 'Unban')),
  })));
  if (document.activeElement?.form !== ui.groupSettingsForm) { // not under the user's hands
    ui.groupRenameInput.value = c.name || '';
    ui.groupTopicInput.value = g.topic || '';
    ui.announcementSwitch.checked = !!g.announcement;
    const choices = SLOW_MODE_CHOICES.includes(g.slowModeSeconds || 0) ? SLOW_MODE_CHOICES : [...SLOW_MODE_CHOICES, g.slowModeSeconds];
    ui.slowModeSelect.replaceChildren(...choices.map((s) => h('option', { value: String(s) }, s ? `one message every ${s} s` : 'off')));
    ui.slowModeSelect.value = String(g.slowModeSeconds || 0);
  }
}

// loadAdminLists reads the open group's invite links and reports (admins only) into the panel.
export async function loadAdminLists() {
  const c = openConv();
  if (!runsGroup(c)) return;
  try {
    const [inv, rep] = await Promise.all([
      request({ type: 'list_invites', conversationId: c.id }),
      request({ type: 'list_reports', conversationId: c.id }),
    ]);
    renderInvites(c, inv.invites || []);
    renderReports(c, rep.reports || []);
  } catch (err) {
    ui.groupInfoError.textContent = failureText('Could not read the invite links and reports', err);
  }
}

// inviteURL is the page's address that joins by token.
const inviteURL = (token) => `${location.origin}${location.pathname}#/join/${token}`;

function renderInvites(c, invites) {
  ui.inviteEmpty.hidden = invites.length > 0;
  reconcile(ui.inviteList, invites.map((i) => ({
    key: i.token,
    sig: `${i.uses || 0}`,
    build: () => h('li', { class: 'invite', 'data-token': i.token },
      h('input', { class: 'invite-url', readonly: true, value: inviteURL(i.token), 'aria-label': 'Invite link' }),
      h('span', { class: 'muted small' }, `${i.uses || 0}${i.maxUses ? ` of ${i.maxUses}` : ''} used${i.expiresAt ? ` · until ${new Date(i.expiresAt).toLocaleString()}` : ''}`),
      h('button', { type: 'button', class: 'link danger revoke-invite', onclick: () => revokeInvite(c, i.token) }, 'Revoke')),
  })));
}

function renderReports(c, reports) {
  ui.reportEmpty.hidden = reports.length > 0;
  reconcile(ui.reportList, reports.map((r) => ({
    key: r.id,
    sig: r.id,
    build: () => h('li', { class: 'report', 'data-report': r.id },
      h('span', { class: 'report-text' }, `${nameOf(r.reporter)} reported message ${r.seq}: ${r.reason}`),
      h('button', { type: 'button', class: 'link go-report', onclick: () => { ui.groupInfo.close(); jumpToMessage(r.seq); } }, 'Show'),
      h('button', { type: 'button', class: 'link dismiss-report', onclick: () => dismissReport(c, r.id) }, 'Dismiss')),
  })));
}

export async function createInvite() {
  const c = openConv();
  if (!c) return;
  const r = await moderate(c, { action: 'create_invite' }, 'create an invite link');
  if (r) { announce('Invite link created'); loadAdminLists(); }
}

async function revokeInvite(c, token) {
  if (await moderate(c, { action: 'revoke_invite', token }, 'revoke the link')) { announce('Invite link revoked'); loadAdminLists(); }
}

async function dismissReport(c, reportId) {
  if (await moderate(c, { action: 'dismiss_report', reportId }, 'dismiss the report')) { announce('Report dismissed'); loadAdminLists(); }
}

// saveGroupSettings sends what the admin changed in the settings form, one action each.
export async function saveGroupSettings(ev) {
  ev.preventDefault();
  const c = openConv();
  const g = c && c.group;
  if (!g) return;
  const name = ui.groupRenameInput.value.trim();
  const topic = ui.groupTopicInput.value.trim();
  const slow = Number(ui.slowModeSelect.value);
  const steps = [];
  if (name && name !== c.name) steps.push([{ action: 'rename', name }, 'rename the group']);
  if (topic !== (g.topic || '')) steps.push([{ action: 'set_topic', topic }, 'set the topic']);
  if (ui.announcementSwitch.checked !== !!g.announcement) steps.push([{ action: 'announcement', enabled: ui.announcementSwitch.checked }, 'change who may post']);
  if (slow !== (g.slowModeSeconds || 0)) steps.push([{ action: 'slow_mode', seconds: slow }, 'change slow mode']);
  for (const [fields, what] of steps) if (!(await moderate(c, fields, what))) return;
  if (steps.length) announce('Group settings saved');
}

// ---- Reporting a message ---------------------------------------------------------------------

// noteReports tells this user, an admin, of a member's report pushed to them, and refreshes the
// open group-info panel's list.
export function noteReports(f) {
  const c = store.convs.get(f.conversationId);
  for (const r of f.reports || []) {
    showNotice(`${nameOf(r.reporter)} reported a message in ${c ? convTitle(c) : 'a group'}: ${r.reason}`);
  }
  if (ui.groupInfo.open) loadAdminLists();
}

const reporting = { convId: '', seq: 0 };

export function openReport(convId, seq) {
  reporting.convId = convId;
  reporting.seq = seq;
  ui.reportReason.value = '';
  ui.reportError.textContent = '';
  ui.reportDialog.showModal();
  ui.reportReason.focus();
}

export async function submitReport(ev) {
  ev.preventDefault();
  const reason = ui.reportReason.value.trim();
  if (!reason) { ui.reportError.textContent = 'Say why you report it.'; return; }
  try {
    await request({ type: 'report', conversationId: reporting.convId, seq: reporting.seq, reason });
    ui.reportDialog.close();
    announce('Reported to the group\'s admins');
  } catch (err) {
    ui.reportError.textContent = failureText('Could not report the message', err);
  }
}

// ---- Joining by invite link ------------------------------------------------------------------

const joining = { token: '' };

// checkJoinLink shows the join page when the address is an invite link (#/join/<token>), once
// the page is signed in and synced.
export async function checkJoinLink() {
  const m = location.hash.match(/^#\/join\/([A-Za-z0-9_-]+)$/);
  if (!m || ui.joinDialog.open) return;
  joining.token = m[1];
  history.replaceState(null, '', location.pathname);
  ui.joinError.textContent = '';
  ui.joinOk.disabled = true;
  ui.joinTitle.textContent = 'Join a group';
  ui.joinText.textContent = 'Reading the invite link…';
  ui.joinDialog.showModal();
  try {
    const r = await request({ type: 'invite_preview', token: joining.token });
    ui.joinTitle.textContent = `Join ${r.invite.name || 'this group'}?`;
    ui.joinText.textContent = `${r.invite.name || 'A group'} · ${r.invite.members} member${r.invite.members === 1 ? '' : 's'}`;
    ui.joinOk.disabled = false;
    ui.joinOk.focus();
  } catch (err) {
    ui.joinText.textContent = '';
    ui.joinError.textContent = failureText('This invite link does not work', err);
  }
}

export async function confirmJoin() {
  ui.joinOk.disabled = true;
  try {
    const r = await request({ type: 'join_invite', token: joining.token });
    onConversation(r.conversation);
    ui.joinDialog.close();
    openConversation(r.conversation.id, { focus: true });
    announce('You joined the group');
  } catch (err) {
    ui.joinError.textContent = failureText('Could not join', err);
    ui.joinOk.disabled = false;
  }
}
