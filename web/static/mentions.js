// Mentions in the composer: "@" and the start of a name offers the open conversation's members
// by display name (arrows and Enter or Tab with a keyboard, a tap on touch); picking one puts
// its token, @[userId], in the draft. The server finds the tokens of members when it stores the
// message (docs/PROTOCOL.md, Mentions); messages.js shows them as names.

import { h, ui } from './dom.js';
import { nameOf } from './names.js';
import { me, openConv } from './state.js';

const MAX_OFFERED = 8; // members offered at once: a short list to pick from while typing

// typed is the "@..." being typed before the caret: where it starts and its letters; null when
// the caret is not in one.
function typed() {
  const before = ui.input.value.slice(0, ui.input.selectionStart);
  const m = /(^|\s)@([\p{L}\p{M}\p{N}_'.-]*)$/u.exec(before);
  return m ? { start: before.length - m[2].length - 1, word: m[2] } : null;
}

// fold is a name as matched: lower case, without accents ("José" is found by "jo" and "JOS").
const fold = (s) => s.normalize('NFD').replace(/\p{M}/gu, '').toLowerCase();

const offer = { ids: [], at: 0 };

// onMentionInput offers the members whose name, or a word of it, starts with what follows "@".
export function onMentionInput() {
  const c = openConv();
  const t = typed();
  if (!c || !t) { closeMentions(); return; }
  const word = fold(t.word);
  offer.ids = c.members.filter((id) => id !== me() && (word === '' ||
    fold(nameOf(id)).split(/\s+/).some((w) => w.startsWith(word)) || id.startsWith(word))).slice(0, MAX_OFFERED);
  offer.at = 0;
  if (!offer.ids.length) { closeMentions(); return; }
  renderOffer();
}

function renderOffer() {
  ui.mentionResults.replaceChildren(...offer.ids.map((id, i) => h('li', {
    id: `mention-${i}`, role: 'option', class: 'person', 'aria-selected': String(i === offer.at), 'data-user-id': id,
    // pointerdown, not click: the textarea keeps the focus (and a phone its keyboard).
    onpointerdown: (e) => { e.preventDefault(); pick(id); },
  }, h('span', { class: 'person-name', dir: 'auto' }, nameOf(id)))));
  ui.mentionResults.hidden = false;
  ui.input.setAttribute('aria-expanded', 'true');
  ui.input.setAttribute('aria-activedescendant', `mention-${offer.at}`);
}

export function closeMentions() {
  if (ui.mentionResults.hidden) return;
  ui.mentionResults.hidden = true;
  ui.mentionResults.replaceChildren();
  ui.input.setAttribute('aria-expanded', 'false');
  ui.input.removeAttribute('aria-activedescendant');
}

// onMentionKey moves through the offer and picks from it; it reports whether it used the key.
export function onMentionKey(e) {
  if (ui.mentionResults.hidden) return false;
  if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
    offer.at = (offer.at + (e.key === 'ArrowDown' ? 1 : -1) + offer.ids.length) % offer.ids.length;
    renderOffer();
  } else if ((e.key === 'Enter' || e.key === 'Tab') && !e.shiftKey) {
    pick(offer.ids[offer.at]);
  } else if (e.key === 'Escape') {
    closeMentions();
  } else {
    return false;
  }
  e.preventDefault();
  return true;
}

// pick replaces the "@..." typed with the member's token and a space.
function pick(id) {
  const t = typed();
  closeMentions();
  if (!t || !id) return;
  const token = `@[${id}] `;
  const end = ui.input.selectionStart;
  ui.input.setRangeText(token, t.start, end, 'end');
  ui.input.dispatchEvent(new Event('input', { bubbles: true }));
  ui.input.focus();
}
