// Display names: asking for them, showing them, and the server's words with names for ids.

import { conn, request } from './connection.js';
import { showConversation } from './conversation.js';
import { applyProfiles } from './dispatch.js';
import { ui } from './dom.js';
import { addPicks, groupPicks } from './finder.js';
import { renderConvList } from './list.js';
import { renderMessages } from './messages.js';
import { renderBlocks } from './settings.js';
import { NAMES_DEBOUNCE_MS, PROFILES_BATCH, me, shown, store } from './state.js';

export function convTitle(c) {
  if (c.kind === 'dm') return nameOf(c.members.find((m) => m !== store.auth.userId) || store.auth.userId);
  return c.name || c.members.filter((m) => m !== store.auth.userId).map(nameOf).join(', ') || 'Group';
}

// ---- Display names ---------------------------------------------------------------------------

// A user is shown by their display name wherever the page used to show the id. Names come from
// profiles replies (asked for every id the page meets and has no name for, in batches) and
// profile pushes; until one is known, and for an id the server does not know, the id is shown.
const names = { asking: new Set(), wanted: new Set(), timer: null };

export function nameOf(userId) {
  if (!userId) return '';
  if (store.auth && userId === store.auth.userId && store.auth.name) return store.auth.name;
  const p = store.names.get(userId);
  if (!p) { wantNames([userId]); return userId; }
  if (p.deleted) return 'Deleted account';
  return p.name || userId;
}

// MENTION_TOKEN is a mention in a message's text: @[userId] (docs/PROTOCOL.md, Mentions).
export const MENTION_TOKEN = /@\[([a-z0-9][a-z0-9_-]{0,63})\]/g;

// mentionsAsNames is text with every mention token shown as "@" and the user's display name, for
// the places that show a message as plain text: the list's preview and a desktop notification.
export function mentionsAsNames(text) {
  return text.replace(MENTION_TOKEN, (_, id) => `@${nameOf(id)}`);
}

// wantNames notes ids whose names the page needs; one profiles request asks for them shortly.
function wantNames(ids) {
  for (const id of ids) {
    if (id && !store.names.has(id) && !names.asking.has(id) && id !== me()) names.wanted.add(id);
  }
  if (names.wanted.size && !names.timer && conn.live) names.timer = setTimeout(askNames, NAMES_DEBOUNCE_MS);
}

async function askNames(ids = [...names.wanted]) {
  clearTimeout(names.timer);
  names.timer = null;
  names.wanted.clear();
  let changed = false;
  for (let i = 0; i < ids.length; i += PROFILES_BATCH) {
    const batch = ids.slice(i, i + PROFILES_BATCH);
    for (const id of batch) names.asking.add(id);
    try {
      const r = await request({ type: 'profiles', userIds: batch });
      applyProfiles(batch, r);
      changed = true;
    } catch {
      // Asked again when a later render needs them (after the next sync at the latest); no
      // redraw now, which would ask again at once.
    } finally {
      for (const id of batch) names.asking.delete(id);
    }
  }
  if (changed) namesChanged();
}

// refreshNames asks again for every name the page holds: profile pushes missed while the page
// was away are not sent again.
export function refreshNames() {
  const ids = [...new Set([...store.names.keys(), ...names.wanted])].filter((id) => id !== me());
  if (ids.length) askNames(ids);
}

// systemText is a system message ("alice added carol, dave") with the user ids in it shown as
// names: the words that are the ids of its sender or of the conversation's members.
export function systemText(c, m) {
  const ids = new Set([m.senderId, ...((c && c.members) || [])]);
  const isId = (w) => ids.has(w) || (store.names.has(w) && !!store.names.get(w).name) || /^u-[0-9a-f]{16}$/.test(w);
  return (m.body || '').split(/(\s+|,)/).map((w) => (w && isId(w) ? nameOf(w) : w)).join('');
}

// namesChanged redraws what shows names: the list, the open conversation, the panels.
export function namesChanged() {
  if (!store.auth) return;
  ui.me.textContent = store.auth.name || store.auth.userId;
  renderConvList();
  if (shown.openId) {
    showConversation();
    renderMessages();
  }
  renderBlocks();
  groupPicks.render();
  addPicks.render();
}
export function errorText(err) {
  if (err.code === 'offline' || err.code === 'disconnected') return 'Not connected; try again in a moment.';
  return namedText(err.message || err.code);
}

// namedText puts the display names the page knows in place of the user ids in a server's words
// ("no such user: mary-jane"): a person is never shown as a bare id where their name is known.
function namedText(text) {
  return text.replace(/[^\s:,;()"]+/g, (word) => {
    const p = store.names.get(word);
    return p && !p.deleted && p.name ? p.name : word;
  });
}

// failureText is "<what could not be done>: <why>." for a refused request, in the server's words.
export function failureText(what, err) {
  const why = errorText(err).replace(/\.$/, '');
  return `${what}: ${why.charAt(0).toLowerCase()}${why.slice(1)}.`;
}
