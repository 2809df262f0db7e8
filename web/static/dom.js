// The page's elements, and building and updating DOM: h() builds elements (text only ever as text
// nodes), reconcile and morph change them in place. It imports only state.js, so it is ready
// before any module that uses it runs.

import { openMenu } from './state.js';

const $ = (id) => document.getElementById(id);
export const ui = {
  loginView: $('login-view'), loginForm: $('login-form'), loginName: $('login-name'),
  loginSubmit: $('login-submit'), loginError: $('login-error'),
  chatView: $('chat-view'), status: $('conn-status'), reconnectNow: $('reconnect-now'),
  me: $('me'), signOut: $('sign-out'), backBadge: $('back-badge'), send: $('send'), warning: $('composer-warning'),
  dmForm: $('dm-form'), dmUser: $('dm-user'), groupForm: $('group-form'), groupName: $('group-name'),
  groupMembers: $('group-members'), groupDetails: $('group-details'), sidebarError: $('sidebar-error'),
  convList: $('conv-list'), convEmpty: $('conv-empty'),
  noConv: $('no-conv'), convBody: $('conv-body'), back: $('back'), title: $('conv-title'),
  meta: $('conv-meta'), jumpLatest: $('jump-latest'), scroller: $('scroller'), loading: $('loading'), list: $('messages'),
  jumpButton: $('jump-button'), jumpPicker: $('jump-picker'), jumpForm: $('jump-form'), jumpDate: $('jump-date'),
  jumpUnread: $('jump-unread'), jumpUnreadLabel: $('jump-unread-label'), jumpStatus: $('jump-status'), jumpGo: $('jump-go'),
  typing: $('typing'), composer: $('composer'), input: $('composer-input'), announcer: $('announcer'),
  notice: $('notice'), noticeText: $('notice-text'), noticeClose: $('notice-close'),
  convMenuButton: $('conv-menu-button'), convMenu: $('conv-menu'), menuGroupInfo: $('menu-group-info'),
  menuBlock: $('menu-block'), menuHide: $('menu-hide'), menuLeave: $('menu-leave'),
  msgMenu: $('msg-menu'), msgReply: $('msg-reply'), msgDelete: $('msg-delete'), msgEdit: $('msg-edit'),
  editBar: $('edit-bar'), editCancel: $('edit-cancel'),
  presenceSwitch: $('presence-switch'), presenceStatus: $('presence-status'),
  nameForm: $('name-form'), nameInput: $('name-input'), nameStatus: $('name-status'),
  dmResults: $('dm-results'), groupPicked: $('group-picked'), groupResults: $('group-results'),
  addPicked: $('add-picked'), addResults: $('add-results'), blockResults: $('block-results'),
  notifySwitch: $('notify-switch'), notifyStatus: $('notify-status'), favicon: $('favicon'),
  replyBar: $('reply-bar'), replySender: $('reply-sender'), replyText: $('reply-text'), replyCancel: $('reply-cancel'),
  confirm: $('confirm'), confirmTitle: $('confirm-title'), confirmText: $('confirm-text'),
  confirmOk: $('confirm-ok'), confirmCancel: $('confirm-cancel'),
  groupInfo: $('group-info'), groupInfoTitle: $('group-info-title'), groupMembersHeading: $('group-members-heading'),
  groupMemberList: $('group-member-list'), addMembersForm: $('add-members-form'), addMembersInput: $('add-members-input'),
  groupInfoError: $('group-info-error'),
  openSettings: $('open-settings'), settings: $('settings'), receiptsSwitch: $('receipts-switch'),
  receiptsStatus: $('receipts-status'), blockedList: $('blocked-list'), blockedEmpty: $('blocked-empty'),
  blockForm: $('block-form'), blockUser: $('block-user'), settingsError: $('settings-error'),
  // Running a group (groupadmin.js).
  pinBar: $('pin-bar'), pinButton: $('pin-button'), pinLabel: $('pin-label'), pinText: $('pin-text'),
  composerGate: $('composer-gate'), msgReport: $('msg-report'), msgPin: $('msg-pin'), groupTopic: $('group-topic'), groupAdmin: $('group-admin'),
  groupSettingsForm: $('group-settings-form'), groupRenameInput: $('group-rename-input'), groupTopicInput: $('group-topic-input'),
  announcementSwitch: $('announcement-switch'), slowModeSelect: $('slow-mode-select'), inviteList: $('invite-list'),
  inviteEmpty: $('invite-empty'), createInvite: $('create-invite'), reportList: $('report-list'), reportEmpty: $('report-empty'),
  reportDialog: $('report-dialog'), reportForm: $('report-form'), reportReason: $('report-reason'), reportCancel: $('report-cancel'),
  reportError: $('report-error'), joinDialog: $('join-dialog'), joinTitle: $('join-title'), joinText: $('join-text'),
  joinOk: $('join-ok'), joinCancel: $('join-cancel'), joinError: $('join-error'),
  searchForm: $('search-form'), searchInput: $('search-input'), searchScope: $('search-scope'),
  searchScopeText: $('search-scope-text'), searchScopeClear: $('search-scope-clear'), searchStatus: $('search-status'),
  searchResults: $('search-results'), searchMore: $('search-more'), menuSearch: $('menu-search'),
  menuNotify: [$('menu-notify-all'), $('menu-notify-mentions'), $('menu-notify-nothing')],
  mentionResults: $('mention-results'),
  uploadTray: $('upload-tray'), attach: $('attach'), fileInput: $('file-input'), imageViewer: $('image-viewer'),
  imageFull: $('image-full'), imageTitle: $('image-title'), imageClose: $('image-close'),
  bannedList: $('banned-list'), bannedEmpty: $('banned-empty'),
  pushSwitch: $('push-switch'), pushStatus: $('push-status'), previewSwitch: $('preview-switch'), previewStatus: $('preview-status'),
};

export function h(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

export function announce(text) {
  ui.announcer.textContent = '';
  // A fresh text node after clearing makes screen readers speak repeated texts too.
  setTimeout(() => { ui.announcer.textContent = text; }, 30);
}

// ---- Updating in place -----------------------------------------------------------------------

// reconcile makes parent's children the keyed items in order, reusing elements whose signature
// did not change (or updating them in place, for items that can), so scrolling, focus and
// screen-reader position survive updates.
export function reconcile(parent, items) {
  const old = new Map();
  for (const e of parent.children) old.set(e.dataset.key, e);
  let ref = parent.firstElementChild;
  for (const it of items) {
    let e = old.get(it.key);
    if (e && e.dataset.sig !== it.sig && it.update) {
      it.update(e);
    } else if (e && e.dataset.sig !== it.sig) {
      const fresh = it.build();
      e.replaceWith(fresh);
      if (ref === e) ref = fresh;
      e = fresh;
    } else if (!e) {
      e = it.build();
    }
    e.dataset.key = it.key;
    e.dataset.sig = it.sig;
    old.delete(it.key);
    if (e !== ref) parent.insertBefore(e, ref);
    else ref = ref.nextElementSibling;
  }
  for (const e of old.values()) e.remove();
}

// morph makes the live element a look like the freshly built b, changing a in place: the
// elements a click may be on (a reaction chip, the menu button) stay the same nodes, so a press
// before a change and the release after it still make a click. Children are matched in order by
// tag and first class (reaction chips by their emoji); an element marked data-replace (a body
// with its own listeners) is matched only when its mark is the same, and then left as it is.
export function morph(a, b) {
  syncAttributes(a, b);
  if (a.hasAttribute('data-replace')) return;
  const olds = [...a.childNodes];
  let at = 0;
  let ref = a.firstChild;
  for (const nb of [...b.childNodes]) {
    let i = at;
    while (i < olds.length && !sameKind(olds[i], nb)) i++;
    if (i < olds.length) {
      const oa = olds[i];
      at = i + 1;
      if (oa.nodeType === Node.TEXT_NODE) {
        if (oa.nodeValue !== nb.nodeValue) oa.nodeValue = nb.nodeValue;
      } else {
        morph(oa, nb);
      }
      if (oa !== ref) a.insertBefore(oa, ref); else ref = ref.nextSibling;
      olds[i] = null;
    } else {
      a.insertBefore(nb, ref);
    }
  }
  for (const oa of olds) if (oa && oa.parentNode === a) oa.remove();
}

// KEPT_ATTRIBUTES are set on message elements after they are built (a focus target, the open
// menu's trigger): morphing leaves them as they are.
const KEPT_ATTRIBUTES = new Set(['tabindex', 'aria-expanded', 'data-key', 'data-sig']);

function syncAttributes(a, b) {
  for (const { name } of [...a.attributes]) {
    if (!b.hasAttribute(name) && !KEPT_ATTRIBUTES.has(name)) a.removeAttribute(name);
  }
  for (const { name, value } of [...b.attributes]) {
    if (name === 'aria-expanded' && a === openMenu.trigger) continue;
    if (name === 'class' && a.classList.contains('flash')) {
      if (a.className !== `${value} flash`) a.className = `${value} flash`; // its highlight is running
      continue;
    }
    if (a.getAttribute(name) !== value) a.setAttribute(name, value);
  }
}

function sameKind(a, b) {
  if (!a || a.nodeType !== b.nodeType) return false;
  if (a.nodeType === Node.TEXT_NODE) return true;
  if (a.nodeType !== Node.ELEMENT_NODE || a.tagName !== b.tagName) return false;
  if (a.getAttribute('data-replace') !== b.getAttribute('data-replace')) return false;
  if (a.dataset.emoji !== b.dataset.emoji) return false;
  return (a.classList[0] || '') === (b.classList[0] || '');
}

export function flash(e) {
  e.classList.add('flash');
  setTimeout(() => e.classList.remove('flash'), 1600);
}
