// Finding people by name in the boxes that name a person, and the people picked in the group forms.

import { onInput } from './composer.js';
import { request } from './connection.js';
import { learnNames } from './dispatch.js';
import { h, reconcile, ui } from './dom.js';
import { groupInfoId } from './groupinfo.js';
import { openDMWith } from './list.js';
import { nameOf } from './names.js';
import { FIND_DEBOUNCE_MS, USER_ID, initial, me, store, userIdOf } from './state.js';

// ---- Find a person ---------------------------------------------------------------------------

export const PICK_SOMEONE = 'Pick someone from the list, or type a user id.';

// personFinder makes a text box a combobox that finds people by name: typing a name (a word of
// it, from its start) lists up to 20 people (find_users) in the listbox results; the arrow keys
// move through them, Enter or a click picks one (onPick), Escape closes the list. A user id can
// still be typed: chosen() says who the box means. skip(userId) leaves people out of the list
// (those already picked or in the group). "Message a user", the group forms and "Block a user"
// each have one.
function personFinder({ input, results, onPick, skip = () => false }) {
  const f = { timer: null, query: '', users: [], active: -1, seq: 0, picked: null };

  function onInput() {
    clearTimeout(f.timer);
    f.picked = null;
    const q = input.value.trim();
    if (!q) { close(); return; }
    f.timer = setTimeout(() => run(q), FIND_DEBOUNCE_MS);
  }

  async function run(q) {
    const mySeq = ++f.seq;
    let r;
    try {
      r = await request({ type: 'find_users', query: q });
    } catch {
      return; // typing an id still works; the next keystroke asks again
    }
    if (mySeq !== f.seq || input.value.trim() !== q) return; // typed on meanwhile
    const users = (r.users || []).filter((u) => !u.deleted && u.userId !== me());
    learnNames(users);
    f.query = q;
    f.users = users.filter((u) => !skip(u.userId));
    f.active = -1;
    render();
  }

  function render() {
    const open = !!f.query;
    results.hidden = !open;
    input.setAttribute('aria-expanded', String(open));
    if (!open) { results.replaceChildren(); input.removeAttribute('aria-activedescendant'); return; }
    if (!f.users.length) {
      results.replaceChildren(h('li', { class: 'people-empty muted', role: 'option', 'aria-disabled': 'true' }, `No one found for "${f.query}"`));
      input.removeAttribute('aria-activedescendant');
      return;
    }
    results.replaceChildren(...f.users.map((u, i) => h('li', {
      role: 'option', id: `${results.id}-${i}`, class: 'person', 'data-user': u.userId, 'aria-selected': String(i === f.active),
    }, h('span', { class: 'avatar', 'aria-hidden': 'true', 'data-initial': initial(u.name || u.userId) }),
    h('span', { class: 'person-name', dir: 'auto' }, u.name || u.userId),
    h('span', { class: 'person-id muted small' }, u.userId))));
    if (f.active >= 0) {
      input.setAttribute('aria-activedescendant', `${results.id}-${f.active}`);
      document.getElementById(`${results.id}-${f.active}`)?.scrollIntoView({ block: 'nearest' });
    } else {
      input.removeAttribute('aria-activedescendant');
    }
  }

  function close() {
    clearTimeout(f.timer);
    f.seq++;
    f.query = '';
    f.users = [];
    f.active = -1;
    render();
  }

  // pick hands the person chosen to onPick; the box shows their name, which chosen() then means.
  function pick(u) {
    f.picked = u;
    input.value = u.name || u.userId;
    close();
    onPick(u);
  }

  function onKey(e) {
    if (e.key === 'Escape' && f.query) { e.preventDefault(); close(); return; }
    if (e.key === 'Enter' && f.users[f.active]) { e.preventDefault(); pick(f.users[f.active]); return; }
    if ((e.key !== 'ArrowDown' && e.key !== 'ArrowUp') || !f.users.length) return;
    e.preventDefault();
    const n = f.users.length;
    f.active = e.key === 'ArrowDown' ? (f.active + 1) % n : (f.active - 1 + n) % n;
    render();
  }

  function onClick(e) {
    const li = e.target.closest('li.person');
    const u = li && f.users.find((x) => x.userId === li.dataset.user);
    if (u) pick(u);
  }

  // named is the person the box names: the one picked, else the one found whose name is
  // exactly what was typed; '' when neither.
  function named() {
    const typed = input.value.trim();
    if (!typed) return '';
    if (f.picked && (f.picked.name || f.picked.userId) === typed) return f.picked.userId;
    const exact = f.query === typed ? f.users.filter((u) => u.name.toLowerCase() === typed.toLowerCase()) : [];
    return exact.length === 1 ? exact[0].userId : '';
  }

  // chosen is the user id the box means: the person it names, else the user id typed (lower
  // case, spaces as -); '' when neither.
  function chosen() {
    const id = userIdOf(input.value);
    return named() || (USER_ID.test(id) ? id : '');
  }

  input.addEventListener('input', onInput);
  input.addEventListener('keydown', onKey);
  input.addEventListener('blur', () => setTimeout(() => { if (document.activeElement !== input) close(); }, 150));
  results.addEventListener('pointerdown', (e) => e.preventDefault()); // keep the focus in the box
  results.addEventListener('click', onClick);
  return { close, named, chosen };
}

// pickedPeople shows the people picked for a group form as chips (display name and a remove
// button) in list, above the finder's box; ids() is what the form sends.
function pickedPeople(list, input) {
  const ids = [];
  function render() {
    list.hidden = !ids.length;
    reconcile(list, ids.map((u) => ({
      key: u,
      sig: nameOf(u),
      build: () => h('li', { class: 'picked-person', 'data-user': u },
        h('span', { class: 'person-name', dir: 'auto' }, nameOf(u)),
        h('button', { type: 'button', class: 'link unpick', 'aria-label': `Remove ${nameOf(u)}`, onclick: () => remove(u) }, '×')),
    })));
  }
  function remove(u) {
    ids.splice(ids.indexOf(u), 1);
    render();
    input.focus();
  }
  return {
    ids: () => [...ids],
    has: (u) => ids.includes(u),
    add(u) { if (!ids.includes(u)) ids.push(u); input.value = ''; render(); input.focus(); },
    clear() { ids.length = 0; render(); },
    render,
  };
}

// membersTyped is who a group form means: the people picked, and whoever its box still names
// (the person found by that name, else user ids, comma or space separated).
export function membersTyped(picked, finder, input) {
  const one = finder.named();
  const typed = one ? [one] : input.value.split(/[,\s]+/).map(userIdOf).filter(Boolean);
  return [...new Set([...picked.ids(), ...typed])];
}

// The boxes that name a person, made in wireFinders (once, from the entry module, as it adds the
// page's other listeners).
export let dmFinder;
export let groupPicks;
export let groupFinder;
export let addPicks;
export let addFinder;
export let blockFinder;

// Each box that names a person finds people by name. Picking in "Message a user" opens the
// DM; in a group form it adds a chip; in "Block a user" it fills the box for Block to confirm.
export function wireFinders() {
  dmFinder = personFinder({ input: ui.dmUser, results: ui.dmResults, onPick: (u) => { ui.sidebarError.textContent = ''; openDMWith(u.userId); } });
  groupPicks = pickedPeople(ui.groupPicked, ui.groupMembers);
  groupFinder = personFinder({ input: ui.groupMembers, results: ui.groupResults, onPick: (u) => groupPicks.add(u.userId), skip: (u) => groupPicks.has(u) });
  addPicks = pickedPeople(ui.addPicked, ui.addMembersInput);
  addFinder = personFinder({
    input: ui.addMembersInput, results: ui.addResults, onPick: (u) => addPicks.add(u.userId),
    skip: (u) => addPicks.has(u) || !!store.convs.get(groupInfoId)?.members.includes(u),
  });
  blockFinder = personFinder({ input: ui.blockUser, results: ui.blockResults, onPick: () => { ui.settingsError.textContent = ''; } });
}
