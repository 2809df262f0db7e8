// Attachments: uploads from the attach button, a paste or a drop, each with a progress bar and a
// cancel, waiting in the composer's tray until the message goes; a message's files shown as
// thumbnails that hold their size while they load (a click or Enter opens the image full size in
// a dialog), or as cards with a download link. Files load through short-lived signed links
// (POST /api/files/links), which an <img> can use without the token.

import { announce, h, ui } from './dom.js';
import { showNotice } from './menus.js';
import { openConv, shown, store, uuid } from './state.js';

// THUMB_BOX is the longest side, in CSS pixels, a thumbnail is shown at: its box is reserved from
// the image's width and height before it loads, so nothing below it jumps.
const THUMB_BOX = 240;
// LINK_MARGIN_MS: a link that expires within this is asked for again before it is used.
const LINK_MARGIN_MS = 30000;

// ---- Uploads ------------------------------------------------------------------------------------

// tray holds the composer's uploads: {key, convId, name, size, loaded, state: uploading | done |
// failed, xhr, upload (the server's answer), error}.
const tray = [];

// addFiles starts uploading files into the open conversation.
export function addFiles(files) {
  const c = openConv();
  if (!c || !files || !files.length) return;
  for (const file of files) tray.push(startUpload(c.id, file));
  renderTray();
}

// startUpload sends one file with XMLHttpRequest, whose upload progress fetch does not report.
function startUpload(convId, file) {
  const u = { key: uuid(), convId, name: file.name || 'pasted image.png', size: file.size, loaded: 0, state: 'uploading' };
  const xhr = new XMLHttpRequest();
  u.xhr = xhr;
  xhr.open('POST', `/api/conversations/${encodeURIComponent(convId)}/uploads?name=${encodeURIComponent(u.name)}`);
  xhr.setRequestHeader('Authorization', `Bearer ${store.auth.token}`);
  xhr.responseType = 'json';
  xhr.upload.addEventListener('progress', (e) => {
    u.loaded = e.loaded;
    const bar = ui.uploadTray.querySelector(`[data-key="${u.key}"] progress`);
    if (bar) bar.value = e.loaded;
  });
  xhr.addEventListener('load', () => {
    if (xhr.status === 201 && xhr.response) {
      u.state = 'done';
      u.upload = xhr.response;
      u.loaded = u.size;
      announce(`${u.name} uploaded`);
    } else {
      u.state = 'failed';
      u.error = (xhr.response && xhr.response.error) || `the server answered ${xhr.status}`;
    }
    renderTray();
  });
  xhr.addEventListener('error', () => { u.state = 'failed'; u.error = 'the connection failed'; renderTray(); });
  xhr.send(file);
  return u;
}

// readyFiles says what the open conversation's tray holds for a send: busy while a file is still
// uploading, and the uploaded files to attach.
export function readyFiles(convId) {
  const mine = tray.filter((u) => u.convId === convId);
  return { busy: mine.some((u) => u.state === 'uploading'), files: mine.filter((u) => u.state === 'done').map((u) => u.upload) };
}

// clearTray empties a conversation's tray once its files went with a message.
export function clearTray(convId) {
  for (let i = tray.length - 1; i >= 0; i--) if (tray[i].convId === convId) tray.splice(i, 1);
  renderTray();
}

// cancelUpload stops an upload (or takes a finished one back out of the tray).
function cancelUpload(key) {
  const i = tray.findIndex((u) => u.key === key);
  if (i < 0) return;
  const [u] = tray.splice(i, 1);
  if (u.state === 'uploading') u.xhr.abort();
  announce(`${u.name} removed`);
  renderTray();
  ui.input.focus();
}

// renderTray shows the open conversation's uploads over the composer.
export function renderTray() {
  const items = tray.filter((u) => u.convId === shown.openId);
  ui.uploadTray.hidden = !items.length;
  ui.uploadTray.replaceChildren(...items.map((u) => h('li', { class: `upload ${u.state}`, 'data-key': u.key, 'data-state': u.state },
    h('span', { class: 'upload-name', dir: 'auto' }, u.name),
    u.state === 'uploading' ? h('progress', { max: u.size || 1, value: u.loaded, 'aria-label': `Uploading ${u.name}` }) : null,
    h('span', { class: `upload-status${u.state === 'failed' ? ' error' : ' muted'}`, role: u.state === 'failed' ? 'alert' : null },
      u.state === 'failed' ? `Not uploaded: ${u.error}` : u.state === 'done' ? humanSize(u.upload.size) : ''),
    h('button', { type: 'button', class: 'link upload-cancel', 'aria-label': `${u.state === 'uploading' ? 'Cancel' : 'Remove'} ${u.name}`,
      onclick: () => cancelUpload(u.key) }, '×'))));
}

// dropFiles takes files dropped on the conversation; pasteFiles files pasted into the composer
// (a screenshot), leaving pasted text to the textarea.
export function dropFiles(e) {
  if (!e.dataTransfer || !e.dataTransfer.types.includes('Files')) return;
  e.preventDefault();
  if (e.type === 'drop') addFiles(e.dataTransfer.files);
}

export function pasteFiles(e) {
  const files = e.clipboardData && e.clipboardData.files;
  if (!files || !files.length) return;
  e.preventDefault();
  addFiles(files);
}

// ---- Showing a message's files --------------------------------------------------------------------

// links holds the signed links the page was given, by file id; asked are ids on their way.
const links = new Map();
const asked = new Set();
let askTimer = 0;

// linkFor is a file's signed link while it has time left; otherwise it asks for a fresh one
// (batched) and returns null, and the elements get their link when it comes.
function linkFor(id) {
  const l = links.get(id);
  if (l && Date.parse(l.expiresAt) - Date.now() > LINK_MARGIN_MS) return l;
  asked.add(id);
  if (!askTimer) askTimer = setTimeout(askLinks, 0);
  return null;
}

async function askLinks() {
  askTimer = 0;
  const ids = [...asked].slice(0, 100);
  ids.forEach((id) => asked.delete(id));
  if (asked.size) askTimer = setTimeout(askLinks, 0);
  try {
    const res = await fetch('/api/files/links', {
      method: 'POST', headers: { Authorization: `Bearer ${store.auth.token}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ ids }),
    });
    if (!res.ok) return;
    const got = (await res.json()).links || {};
    for (const [id, l] of Object.entries(got)) links.set(id, l);
    applyLinks(got);
  } catch {
    // Offline: the next render asks again.
  }
}

// applyLinks gives the files on screen the links that came.
function applyLinks(got) {
  for (const e of document.querySelectorAll('[data-file-id]')) {
    const l = got[e.dataset.fileId];
    if (!l) continue;
    if (e.tagName === 'IMG') e.src = e.dataset.full === 'true' ? l.url : l.thumbnailUrl;
    else if (e.tagName === 'A') e.href = l.url;
  }
}

// isImage says a file is shown inline: the server made it a clean image with a thumbnail.
const isImage = (a) => a.width > 0 && a.thumbnail;

// filesOf shows a message's files under its text.
export function filesOf(m) {
  const files = m.attachments || [];
  if (!files.length || m.kind === 'deleted') return null;
  return h('div', { class: 'files' }, ...files.map((a) => (isImage(a) ? thumbItem(a) : fileCard(a))));
}

// fit scales a w×h image down into a box of side pixels.
function fit(w, hgt, side) {
  const k = Math.min(1, side / Math.max(w, hgt));
  return [Math.max(1, Math.round(w * k)), Math.max(1, Math.round(hgt * k))];
}

function thumbItem(a) {
  const [w, hgt] = fit(a.width, a.height, THUMB_BOX);
  const l = linkFor(a.id);
  return h('button', { type: 'button', class: 'thumb', 'data-open-file': a.id, 'aria-label': `Photo ${a.name}, open full size` },
    h('img', { class: 'thumb-img', width: w, height: hgt, alt: '', 'data-file-id': a.id, src: l ? l.thumbnailUrl : null }));
}

function fileCard(a) {
  const l = linkFor(a.id);
  const type = (a.type || '').split(';')[0];
  return h('div', { class: 'file-card', 'data-file': a.id },
    h('span', { class: 'file-name', dir: 'auto' }, a.name),
    h('span', { class: 'file-meta' }, `${humanSize(a.size)} · ${type}`),
    h('a', { class: 'file-download', 'data-file-id': a.id, href: l ? l.url : null, download: a.name, 'aria-label': `Download ${a.name}` }, 'Download'));
}

// openImage shows a message's image full size in the viewer dialog (a click or Enter on its
// thumbnail); Escape or Close closes it and the focus goes back to the thumbnail.
export function openImage(e) {
  const thumb = e.target.closest('.thumb');
  if (!thumb) return;
  const a = findFile(thumb.dataset.openFile);
  if (!a) return;
  const l = linkFor(a.id);
  const img = ui.imageFull;
  img.dataset.fileId = a.id;
  img.width = a.width;
  img.height = a.height;
  img.alt = a.name;
  if (l) img.src = l.url; else img.removeAttribute('src');
  ui.imageTitle.textContent = a.name;
  ui.imageViewer.showModal();
}

// findFile looks a file up among the open conversation's loaded messages.
function findFile(id) {
  const w = store.windows.get(shown.openId);
  if (!w) return null;
  for (const m of w.bySeq.values()) {
    const a = (m.attachments || []).find((x) => x.id === id);
    if (a) return a;
  }
  return null;
}

// attachmentLabel is how a quote or a list preview names a message's first file: "Photo" for an
// image, else its name.
export function attachmentLabel(ref) {
  if (!ref) return '';
  return ref.image ? 'Photo' : ref.name;
}

// firstAttachment is the reference a quote or preview makes to a message's files.
export function firstAttachment(m) {
  const a = m && m.attachments && m.attachments[0];
  return a ? { name: a.name, image: isImage(a) } : null;
}

// humanSize says a size the way people read it.
export function humanSize(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(n < 10240 ? 1 : 0)} KB`;
  return `${(n / 1048576).toFixed(1)} MB`;
}

export function closeImage() { ui.imageViewer.close(); }

export function noticeUploadsBusy() { showNotice('Files are still uploading: send when they are done, or cancel them.'); }
