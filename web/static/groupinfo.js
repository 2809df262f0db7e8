// The group-info panel (members, adding and removing them) and presence ("online", "last seen").

import { conn, request } from './connection.js';
import { showConversation } from './conversation.js';
import { applyPresenceList } from './dispatch.js';
import { announce, h, morph, reconcile, ui } from './dom.js';
import { PICK_SOMEONE, addFinder, addPicks, membersTyped } from './finder.js';
import {
  canRemove, loadAdminLists, moderationButtons, mutedUntil, renderGroupAdmin, roleOf, setRole
} from './groupadmin.js';
import { refreshListSoon } from './list.js';
import { closeMenus, confirmAction, dmPeer } from './menus.js';
import { convTitle, failureText, nameOf } from './names.js';
import { PRESENCE_BATCH, formatTime, initial, me, openConv, store } from './state.js';

// ---- Group info ------------------------------------------------------------------------------

export let groupInfoId = null; // the group the open panel shows

export function openGroupInfo() {
  const c = openConv();
  closeMenus();
  if (!c || c.kind !== 'group') return;
  if (groupInfoId !== c.id) { addPicks.clear(); ui.addMembersInput.value = ''; } // picked for another group
  groupInfoId = c.id;
  ui.groupInfoError.textContent = '';
  ui.groupInfo.showModal();
  renderGroupInfo(); // after showModal: it renders only an open panel
  ui.addMembersInput.focus();
  requestGroupPresence();
  loadAdminLists();
}

// requestGroupPresence asks who of the open panel's members is online (a group of more than 32
// gets no presence pushes, so this is how its panel learns); pushes keep small groups current.
export async function requestGroupPresence() {
  const c = store.convs.get(groupInfoId);
  if (!c || !conn.live) return;
  const others = c.members.filter((u) => u !== me());
  for (let i = 0; i < others.length; i += PRESENCE_BATCH) {
    const ids = others.slice(i, i + PRESENCE_BATCH);
    try {
      applyPresenceList(ids, await request({ type: 'presence', userIds: ids }));
    } catch {
      return; // a nicety; the next opening asks again
    }
  }
  renderGroupInfo();
}

// renderGroupInfo updates the open panel in place (a member joined or left meanwhile, someone
// came online, a role changed); it closes when the user is no longer in the group. Each member
// shows their role (owner, admin); the panel offers Remove, Mute and Ban where the user's role
// allows it (see canRemove, moderationButtons), and the owner Make admin / Make member.
export function renderGroupInfo() {
  if (!ui.groupInfo.open) return;
  const c = store.convs.get(groupInfoId);
  if (!c) { ui.groupInfo.close(); return; }
  ui.groupInfoTitle.textContent = convTitle(c);
  ui.groupMembersHeading.textContent = `${c.members.length} member${c.members.length === 1 ? '' : 's'}`;
  const iOwn = roleOf(c, me()) === 'owner';
  reconcile(ui.groupMemberList, c.members.map((u) => {
    const presence = u === me() ? '' : presenceText(u);
    const creator = u === c.createdBy;
    const role = roleOf(c, u);
    const removable = canRemove(c, u);
    const appoint = iOwn && u !== me();
    const build = () => h('li', { class: 'member', 'data-user': u, 'data-role': role },
      h('span', { class: 'avatar', 'aria-hidden': 'true', 'data-initial': initial(nameOf(u)) }),
      h('span', { class: 'member-text' },
        h('span', { class: 'member-line' },
          h('span', { class: 'member-name', dir: 'auto' }, u === me() ? `${nameOf(u)} (you)` : nameOf(u)),
          role !== 'member' ? h('span', { class: 'role-badge' }, role) : null),
        creator || presence ? h('span', { class: 'member-presence muted small', 'data-presence': presence },
          [creator ? 'created the group' : '', presence].filter(Boolean).join(' · ')) : null),
      appoint ? h('button', { type: 'button', class: 'link set-role', onclick: () => setRole(c, u, role !== 'admin') },
        role === 'admin' ? 'Make member' : 'Make admin') : null,
      ...moderationButtons(c, u),
      removable ? h('button', { type: 'button', class: 'link danger remove-member', 'aria-label': `Remove ${nameOf(u)} from the group`, onclick: () => removeMember(u) }, 'Remove') : null);
    return {
      key: u,
      sig: [u === me(), presence, creator, role, removable, appoint, nameOf(u), mutedUntil(c, u)].join('|'),
      build,
      // In place, like messages: a press on Remove before a presence change and the release
      // after it still make a click.
      update: (e) => morph(e, build()),
    };
  }));
  renderGroupAdmin();
}

export async function addMembers(ev) {
  ev.preventDefault();
  const c = store.convs.get(groupInfoId);
  const members = membersTyped(addPicks, addFinder, ui.addMembersInput);
  if (!c) return;
  ui.groupInfoError.textContent = '';
  if (!members.length) { ui.groupInfoError.textContent = PICK_SOMEONE; ui.addMembersInput.focus(); return; }
  const who = members.map(nameOf).join(', ');
  try {
    await request({ type: 'add_members', conversationId: c.id, members });
    ui.addMembersInput.value = ''; // the box and the chips are kept on a refusal, to be corrected
    addPicks.clear();
    announce(`Added ${who}`);
    refreshListSoon(); // the members, also if the system message is slow to come
  } catch (err) {
    ui.groupInfoError.textContent = failureText(`Could not add ${who}`, err);
  }
}

async function removeMember(userId) {
  const c = store.convs.get(groupInfoId);
  if (!c) return;
  const ok = await confirmAction({
    title: `Remove ${nameOf(userId)}?`,
    text: `${nameOf(userId)} leaves ${convTitle(c)} and stops getting its messages.`,
    ok: 'Remove',
  });
  if (!ok) return;
  ui.groupInfoError.textContent = '';
  try {
    await request({ type: 'remove_member', conversationId: c.id, userId });
    announce(`Removed ${nameOf(userId)}`);
    refreshListSoon();
  } catch (err) {
    ui.groupInfoError.textContent = failureText(`Could not remove ${nameOf(userId)}`, err);
  }
}

// ---- Presence -------------------------------------------------------------------------------

// Presence is pushed for DM peers (and small groups) when it changes; the page asks for the open
// DM's peer when it opens it and after every reconnect, since pushes missed while away are gone.
export function requestPresence() {
  const peer = dmPeer(openConv());
  if (!peer || !conn.live) return;
  request({ type: 'presence', userIds: [peer] }).then((r) => {
    applyPresenceList([peer], r);
    if (dmPeer(openConv()) === peer) showConversation();
  }).catch(() => { /* a nicety; the next push or reconnect tells */ });
}

// presenceText is "online", "last seen <time>", or nothing when it is not known or hidden.
export function presenceText(userId) {
  const p = store.presence.get(userId);
  if (!p) return '';
  if (p.online) return 'online';
  return p.lastSeen ? `last seen ${formatTime(p.lastSeen)}` : '';
}
