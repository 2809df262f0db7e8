// Message search: the box over the list finds messages in every conversation; "Search in this
// conversation" (the conversation menu) narrows it to the open one. A hit opens in place, the
// way a reply's quote does (history around its seq), and is highlighted.

import { request } from './connection.js';
import { closeConversation, openConversation, replaceWindow } from './conversation.js';
import { announce, flash, h, ui } from './dom.js';
import { closeMenus } from './menus.js';
import { convTitle, failureText, nameOf } from './names.js';
import { PHONE, formatTime, openConv, shown, store } from './state.js';

// found is the search on screen: its words, the conversation it is narrowed to ('' for all), the
// hits so far and the cursor of the next page.
const found = { query: '', scope: '', hits: [], cursor: '' };

export async function submitSearch(ev) {
  ev.preventDefault();
  found.query = ui.searchInput.value.trim();
  found.hits = [];
  found.cursor = '';
  if (!found.query) { renderHits(); return; }
  await searchMore();
}

// searchMore asks for the next page of the search on screen.
export async function searchMore() {
  const frame = { type: 'search', query: found.query };
  if (found.scope) frame.conversationId = found.scope;
  if (found.cursor) frame.cursor = found.cursor;
  const asked = found.query;
  ui.searchStatus.textContent = 'Searching…';
  let r;
  try {
    r = await request(frame);
  } catch (err) {
    ui.searchStatus.textContent = failureText('Could not search', err);
    return;
  }
  if (asked !== found.query) return; // a newer search replaced it
  found.hits.push(...(r.hits || []));
  found.cursor = r.cursor || '';
  renderHits();
}

function renderHits() {
  const n = found.hits.length;
  ui.searchResults.hidden = n === 0;
  ui.searchMore.hidden = !found.cursor;
  ui.searchStatus.textContent = !found.query ? ''
    : n ? `${n} message${n === 1 ? '' : 's'} found${found.cursor ? ', more below' : ''}` : `No messages found for "${found.query}"`;
  ui.searchResults.replaceChildren(...found.hits.map((hit) => {
    const c = store.convs.get(hit.conversationId);
    return h('li', {}, h('button', { type: 'button', class: 'hit', 'data-conv-id': hit.conversationId, 'data-seq': String(hit.seq),
      onclick: () => openHit(hit) },
    h('span', { class: 'hit-line muted small' }, `${c ? convTitle(c) : 'A conversation'} · ${nameOf(hit.senderId)} · ${formatTime(hit.createdAt)}`),
    ' ',
    h('span', { class: 'hit-snippet', dir: 'auto' }, ...(hit.snippet || []).map((run) => (run.match ? h('mark', {}, run.text) : run.text)))));
  }));
}

// openHit opens a hit's conversation at the hit, highlighted, with the focus on it.
export async function openHit(hit) {
  if (!store.convs.has(hit.conversationId)) return;
  if (shown.openId !== hit.conversationId) openConversation(hit.conversationId);
  shown.following = false;
  await replaceWindow(hit.conversationId, { around: hit.seq }, { toSeq: hit.seq, highlight: true });
  const li = ui.list.querySelector(`:scope > li[data-seq="${hit.seq}"]`);
  if (!li || shown.openId !== hit.conversationId) return;
  li.tabIndex = -1;
  li.focus({ preventScroll: true });
  flash(li);
  announce('Showing the message found');
}

// searchHere narrows the search box to the open conversation; on a phone the list, where the box
// is, comes back into view.
export function searchHere() {
  const c = openConv();
  closeMenus();
  if (!c) return;
  found.scope = c.id;
  ui.searchScopeText.textContent = `In ${convTitle(c)}`;
  ui.searchScope.hidden = false;
  if (window.matchMedia(PHONE).matches) closeConversation();
  ui.searchInput.focus();
}

export function searchEverywhere() {
  found.scope = '';
  ui.searchScope.hidden = true;
  ui.searchInput.focus();
}
