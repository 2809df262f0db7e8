// chatd demo page: plain JavaScript, no build step. It speaks the JSON frames defined in
// protocol/protocol.go over one WebSocket, and keeps only what the open views need in memory: the
// conversation list, and per conversation one contiguous window of messages [lo, hi].
//
// This is the entry module: the page's other modules (native ES modules, loaded by the browser
// with no bundler) only declare; what runs is here, after every module is loaded: the listeners,
// then the start. Server data lives in one store (state.js) that only the frame dispatcher
// (dispatch.js and dispatch-windows.js) writes; the views read it and render.

import { cancelEdit, cancelReply, onInput, startEdit, startReply, submitMessage } from './composer.js';
import { conn, connect } from './connection.js';
import { closeConversation, maybeLoadMore, nearBottom } from './conversation.js';
import { setAuth } from './dispatch.js';
import { ui } from './dom.js';
import { addFiles, closeImage, dropFiles, openImage, pasteFiles } from './files.js';
import { wireFinders } from './finder.js';
import {
  checkJoinLink, confirmJoin, createInvite, jumpToPin, openReport, saveGroupSettings, submitReport, togglePin
} from './groupadmin.js';
import { addMembers, openGroupInfo } from './groupinfo.js';
import { confirmJump, openJumpPicker } from './jump.js';
import { createGroup, openDM } from './list.js';
import {
  cancelPress, closeMenus, deleteForEveryone, hideConversation, hideNotice, leaveGroup, msgMenuFor,
  onListClick, onListPointerDown, onListPointerMove, onMenuKey, openConvMenu, press, reactFromMenu,
  toggleBlockFromMenu
} from './menus.js';
import { jumpToLatest, updateCue } from './messages.js';
import { closeMentions, onMentionInput, onMentionKey } from './mentions.js';
import { setConvNotify, setNotify } from './notifications.js';
import { setPreview, setPush } from './push.js';
import { flushReadUnloading, markVisibleRead } from './reads.js';
import { loadAuth, showLogin, signIn, signOutHere, start } from './session.js';
import { searchEverywhere, searchHere, searchMore, submitSearch } from './search.js';
import { blockFromSettings, openSettings, saveName, setPresenceShown, setReceipts } from './settings.js';
import { MENU_SCROLL_CLOSE_PX, PHONE, openConv, openMenu, openWindow, shown, store } from './state.js';

// ---- Wiring ----------------------------------------------------------------------------------

// A reload on a phone starts at the list, as a phone's chat apps do; a desktop reload, and a link
// to a conversation (#c=<id>), still open the conversation.
if (window.matchMedia(PHONE).matches && performance.getEntriesByType('navigation')[0]?.type === 'reload') {
  history.replaceState(null, '', location.pathname);
}

// The skip link focuses the message box (or, with no conversation open, the DM box) without
// touching location.hash, which remembers the open conversation.
document.querySelector('.skip-link').addEventListener('click', (e) => {
  e.preventDefault();
  (ui.convBody.hidden ? ui.dmUser : ui.input).focus();
});
ui.loginForm.addEventListener('submit', signIn);
ui.signOut.addEventListener('click', signOutHere);
ui.openSettings.addEventListener('click', openSettings);
ui.noticeClose.addEventListener('click', hideNotice);
ui.convMenuButton.addEventListener('click', openConvMenu);
ui.menuGroupInfo.addEventListener('click', openGroupInfo);
ui.menuBlock.addEventListener('click', toggleBlockFromMenu);
ui.menuHide.addEventListener('click', hideConversation);
ui.menuLeave.addEventListener('click', leaveGroup);
ui.msgReply.addEventListener('click', startReply);
ui.msgDelete.addEventListener('click', deleteForEveryone);
ui.msgEdit.addEventListener('click', startEdit);
ui.msgReport.addEventListener('click', () => {
  const { convId, seq } = msgMenuFor;
  closeMenus();
  openReport(convId, seq);
});
ui.msgPin.addEventListener('click', () => {
  const { convId, seq } = msgMenuFor;
  closeMenus();
  togglePin(convId, seq);
});
ui.pinButton.addEventListener('click', jumpToPin);
ui.groupSettingsForm.addEventListener('submit', saveGroupSettings);
ui.createInvite.addEventListener('click', createInvite);
ui.reportForm.addEventListener('submit', submitReport);
ui.reportCancel.addEventListener('click', () => ui.reportDialog.close());
ui.joinOk.addEventListener('click', confirmJoin);
ui.joinCancel.addEventListener('click', () => ui.joinDialog.close());
// An invite link opened in a page already signed in (once connected; else the sync checks it).
window.addEventListener('hashchange', () => { if (conn.live) checkJoinLink(); });
ui.editCancel.addEventListener('click', () => cancelEdit());
ui.msgMenu.addEventListener('click', reactFromMenu);
ui.presenceSwitch.addEventListener('change', setPresenceShown);
ui.notifySwitch.addEventListener('change', setNotify);
for (const b of ui.menuNotify) b.addEventListener('click', setConvNotify);
ui.menuSearch.addEventListener('click', searchHere);
ui.searchForm.addEventListener('submit', submitSearch);
ui.searchMore.addEventListener('click', searchMore);
ui.searchScopeClear.addEventListener('click', searchEverywhere);
ui.pushSwitch.addEventListener('change', setPush);
ui.previewSwitch.addEventListener('change', setPreview);
ui.replyCancel.addEventListener('click', cancelReply);
ui.addMembersForm.addEventListener('submit', addMembers);
ui.receiptsSwitch.addEventListener('change', setReceipts);
ui.blockForm.addEventListener('submit', blockFromSettings);
for (const menu of [ui.convMenu, ui.msgMenu]) menu.addEventListener('keydown', onMenuKey);
// A click anywhere but in the open menu or on its button closes it.
document.addEventListener('pointerdown', (e) => {
  if (openMenu.el && !openMenu.el.contains(e.target) && !(openMenu.trigger && openMenu.trigger.contains(e.target))) closeMenus();
});
for (const d of [ui.groupInfo, ui.settings, ui.jumpPicker]) {
  d.addEventListener('click', (e) => {
    // The close button, or a click on the backdrop: the dialog element itself, outside its box.
    const r = d.getBoundingClientRect();
    const outside = e.target === d && (e.clientX < r.left || e.clientX > r.right || e.clientY < r.top || e.clientY > r.bottom);
    if (e.target.closest('[data-close]') || outside) d.close();
  });
}
ui.list.addEventListener('click', onListClick);
// Attachments (files.js): the attach button, a paste, a drop; a thumbnail opens the image viewer.
ui.list.addEventListener('click', openImage);
ui.attach.addEventListener('click', () => ui.fileInput.click());
ui.fileInput.addEventListener('change', () => { addFiles(ui.fileInput.files); ui.fileInput.value = ''; });
ui.input.addEventListener('paste', pasteFiles);
for (const type of ['dragover', 'drop']) ui.convBody.addEventListener(type, dropFiles);
ui.imageClose.addEventListener('click', closeImage);
ui.list.addEventListener('pointerdown', onListPointerDown);
ui.list.addEventListener('pointermove', onListPointerMove, { passive: true });
ui.list.addEventListener('pointerup', cancelPress);
ui.list.addEventListener('pointercancel', cancelPress);
// The browser's own long-press menu, after ours opened, would cover it.
ui.list.addEventListener('contextmenu', (e) => { if (press.fired || press.timer) e.preventDefault(); });
ui.reconnectNow.addEventListener('click', () => { conn.attempt = 0; connect(); });
ui.dmForm.addEventListener('submit', openDM);
wireFinders();
ui.nameForm.addEventListener('submit', saveName);
ui.groupForm.addEventListener('submit', createGroup);
ui.composer.addEventListener('submit', submitMessage);
ui.input.addEventListener('input', onInput);
ui.input.addEventListener('input', onMentionInput);
ui.input.addEventListener('blur', () => setTimeout(closeMentions, 0));
ui.input.addEventListener('keydown', (e) => {
  if (onMentionKey(e)) return;
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); ui.composer.requestSubmit(); }
  if (e.key === 'Escape' && shown.editing) { e.preventDefault(); cancelEdit(); }
});
ui.back.addEventListener('click', () => { closeConversation(); ui.convList.querySelector('button')?.focus(); });
ui.jumpLatest.addEventListener('click', jumpToLatest);
ui.jumpButton.addEventListener('click', openJumpPicker);
ui.jumpForm.addEventListener('submit', confirmJump);
// Picking a date chooses "a date"; the arrows of the radio group only choose, never jump.
ui.jumpDate.addEventListener('input', () => { ui.jumpForm.elements.target.value = 'date'; });
ui.scroller.addEventListener('scroll', () => {
  // The menu floats where its message was: once the message has moved away, close it. A small
  // move (a new message followed at the bottom) leaves it open.
  if (openMenu.el === ui.msgMenu && Math.abs(ui.scroller.scrollTop - msgMenuFor.scrollTop) > MENU_SCROLL_CLOSE_PX) closeMenus();
  shown.following = nearBottom();
  maybeLoadMore();
  updateCue();
}, { passive: true });
document.addEventListener('keydown', (e) => {
  if (e.defaultPrevented) return;
  if (e.key === 'Escape' && (openMenu.el || document.querySelector('dialog[open]'))) return; // closes that instead
  if (e.key === 'Escape' && document.body.classList.contains('show-conv') && window.matchMedia(PHONE).matches) {
    closeConversation();
  }
});
document.addEventListener('visibilitychange', () => {
  if (document.visibilityState === 'hidden') flushReadUnloading();
  else markVisibleRead();
});
// beforeunload comes while the next page is still being fetched, so the read frame has time to
// leave; by pagehide the socket is torn down with whatever is still buffered.
window.addEventListener('beforeunload', flushReadUnloading);
window.addEventListener('pagehide', flushReadUnloading);
window.addEventListener('online', () => { if (!conn.ws && store.auth) { conn.attempt = 0; connect(); } });
// A pane that gets shorter (a smaller window, a taller draft, a phone keyboard) keeps its newest
// message in view if it was there.
new ResizeObserver(() => {
  const c = openConv();
  const w = openWindow();
  if (c && w && shown.following && !w.hasAfter) ui.scroller.scrollTop = ui.scroller.scrollHeight;
}).observe(ui.scroller);

setAuth(loadAuth());
if (store.auth) start();
else showLogin();
