// chatd demo page: plain JavaScript, no build step. It speaks the JSON frames defined in
// protocol/protocol.go over one WebSocket, and keeps only what the open views need in memory: the
// conversation list, and per conversation one contiguous window of messages [lo, hi].
'use strict';

(() => {
  // Tuning, each with its reason.
  const PAGE_SIZE = 50; // one history page; a screenful or three
  const MAX_WINDOW = 300; // messages kept per conversation; older ones are paged in again on scroll
  const EDGE_PX = 400; // load the next page when scrolled this close to an end
  const READ_DEBOUNCE_MS = 500; // coalesce read cursors while the user scrolls
  const REQUEST_TIMEOUT_MS = 15000; // the server bounds its own work at 10 s
  const SEND_TIMEOUT_MS = 12000; // the server answers a send within its 10 s send timeout
  const TYPING_SEND_EVERY_MS = 3000; // at most one typing frame per conversation this often
  const TYPING_SHOW_MS = 5000; // how long a typing push is shown
  const BACKOFF_BASE_MS = 500; // first reconnect delay, doubled per failed attempt
  const BACKOFF_MAX_MS = 15000; // reconnect delay cap
  const TOKEN_CHECK_EVERY_MS = 30000; // at most one token check per this long while failing
  const PAGE_RETRY_MS = 2000; // after a failed page load, scrolling tries again no sooner than this
  const HEARTBEAT_MS = 20000; // a ping frame this often finds a dead connection (browsers hide WebSocket pings)
  const PONG_TIMEOUT_MS = 10000; // no pong within this long: the connection is dead, reconnect
  const MAX_BODY_BYTES = 16384; // protocol.MaxBodyBytes: the server counts a body's UTF-8 bytes
  const LONG_BODY_CHARS = 1200; // a body longer than this, or of more lines than LONG_BODY_LINES, is collapsed
  const LONG_BODY_LINES = 14;
  const PREVIEW_CHARS = 600; // what a collapsed body shows; only this much is laid out until expanded
  const PREVIEW_LINES = 8;
  const RESEND_MAX_TRIES = 5; // automatic resends of one message refused as rate limited, per reconnect
  const AUTH_KEY = 'chatd.auth';
  const PENDING_KEY = 'chatd.pending.';
  const READS_KEY = 'chatd.reads.'; // read cursors sent while the page unloaded, in case they were lost
  const PRIVACY_KEY = 'chatd.privacy.'; // the receipts switch as last set here: the server has no frame that tells it
  const LONG_PRESS_MS = 500; // a touch held this long opens the message menu (the platform's own long-press is longer)
  const LONG_PRESS_SLOP_PX = 10; // a finger that moves further is scrolling, not pressing
  const USER_ID = /^[a-z0-9][a-z0-9_-]{0,63}$/; // auth.ValidUserID
  const QUOTE_CHARS = 80; // how much of a replied-to message its quote shows
  const LIST_PREVIEW_CHARS = 120; // how much of a conversation's newest message its list entry keeps (one line shows less)
  const MENU_SCROLL_CLOSE_PX = 40; // the message menu closes once its message has scrolled this far away
  const DELIVERED_DEBOUNCE_MS = 300; // coalesce delivered positions while a replay or a page arrives
  const PRESENCE_KEY = 'chatd.presence.'; // the presence switch as last set here: no frame tells it
  const NOTIFY_KEY = 'chatd.notify.'; // "Notify me" as set on this device ('on'); a browser's permission is per device too
  const MUTED_KEY = 'chatd.muted.'; // conversations muted on this device (JSON list of ids): no desktop notification
  const NOTIFY_BODY_CHARS = 200; // how much of a message a desktop notification shows
  const PRESENCE_BATCH = 100; // users per presence request, the protocol's limit
  const PROFILES_BATCH = 100; // users per profiles request, the protocol's limit
  const NAMES_DEBOUNCE_MS = 30; // gather the ids a render asks for into one profiles request
  const FIND_DEBOUNCE_MS = 250; // wait for a pause in typing before asking find_users
  const FAVICON_PX = 64; // the drawn favicon's size; browsers scale it to the tab's 16 or 32 px
  const PHONE = '(max-width: 700px)'; // style.css's one-view-at-a-time layout

  const $ = (id) => document.getElementById(id);
  const ui = {
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
    notifySwitch: $('notify-switch'), notifyStatus: $('notify-status'), menuMute: $('menu-mute'), favicon: $('favicon'),
    replyBar: $('reply-bar'), replySender: $('reply-sender'), replyText: $('reply-text'), replyCancel: $('reply-cancel'),
    confirm: $('confirm'), confirmTitle: $('confirm-title'), confirmText: $('confirm-text'),
    confirmOk: $('confirm-ok'), confirmCancel: $('confirm-cancel'),
    groupInfo: $('group-info'), groupInfoTitle: $('group-info-title'), groupMembersHeading: $('group-members-heading'),
    groupMemberList: $('group-member-list'), addMembersForm: $('add-members-form'), addMembersInput: $('add-members-input'),
    groupInfoError: $('group-info-error'),
    openSettings: $('open-settings'), settings: $('settings'), receiptsSwitch: $('receipts-switch'),
    receiptsStatus: $('receipts-status'), blockedList: $('blocked-list'), blockedEmpty: $('blocked-empty'),
    blockForm: $('block-form'), blockUser: $('block-user'), settingsError: $('settings-error'),
  };

  // ---- State ----------------------------------------------------------------------------------

  const state = {
    auth: null, // {token, userId, name}
    convs: new Map(), // id -> conversation view (see upsertConv)
    total: 0, // total unread, from badge frames
    openId: null, // the conversation on screen
    windows: new Map(), // conversation id -> message window
    buffers: new Map(), // conversation id -> live messages that arrived while its window loaded
    pending: new Map(), // clientMsgId -> unconfirmed send
    divider: null, // {convId, afterSeq}: the "new messages" line of the open conversation
    expanded: new Set(), // "<conversation id>:<seq>" of long messages the user expanded
    following: true, // the open conversation is scrolled to its newest message and should stay there
    view: 0, // bumped when the open conversation or its window is replaced
    replyTo: new Map(), // conversation id -> seq the next send there answers (the composer shows it)
    blocks: new Set(), // users this user blocks (list_blocks), for the DM menu and the settings panel
    editing: null, // {convId, seq, draft}: the own message the composer edits, and the draft it set aside
    presence: new Map(), // user id -> {online, lastSeen}: from presence pushes and presence_list replies
    names: new Map(), // user id -> {name, deleted}: from profiles replies and profile pushes
  };

  const conn = {
    ws: null, opened: false, live: false, attempt: 0, timer: null, retryAt: 0, countdown: null,
    nextId: 1, waiting: new Map(), lastTokenCheck: 0, heartbeat: null,
  };

  class RequestError extends Error {
    constructor(code, message, retryable, retryAfterMs = 0) {
      super(message);
      this.code = code;
      this.retryable = retryable;
      this.retryAfterMs = retryAfterMs;
    }
  }

  // ---- Small helpers ---------------------------------------------------------------------------

  function uuid() {
    if (window.crypto && typeof crypto.randomUUID === 'function') return crypto.randomUUID();
    // Pages served over plain http from another host are not a secure context: build a v4 uuid.
    const b = crypto.getRandomValues(new Uint8Array(16));
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    const h = [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
  }

  // userIdOf mirrors auth.UserIDFromName: lower case, runs of spaces to one dash.
  const userIdOf = (name) => name.trim().toLowerCase().split(/\s+/).join('-');

  function h(tag, attrs, ...children) {
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

  function formatTime(iso) {
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return '';
    const sameDay = d.toDateString() === new Date().toDateString();
    return sameDay ? d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })
      : d.toLocaleString([], { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' });
  }

  function convTitle(c) {
    if (c.kind === 'dm') return nameOf(c.members.find((m) => m !== state.auth.userId) || state.auth.userId);
    return c.name || c.members.filter((m) => m !== state.auth.userId).map(nameOf).join(', ') || 'Group';
  }

  const me = () => state.auth && state.auth.userId;

  // ---- Display names ---------------------------------------------------------------------------

  // A user is shown by their display name wherever the page used to show the id. Names come from
  // profiles replies (asked for every id the page meets and has no name for, in batches) and
  // profile pushes; until one is known, and for an id the server does not know, the id is shown.
  const names = { asking: new Set(), wanted: new Set(), timer: null };

  function nameOf(userId) {
    if (!userId) return '';
    if (state.auth && userId === state.auth.userId && state.auth.name) return state.auth.name;
    const p = state.names.get(userId);
    if (!p) { wantNames([userId]); return userId; }
    if (p.deleted) return 'Deleted account';
    return p.name || userId;
  }

  // wantNames notes ids whose names the page needs; one profiles request asks for them shortly.
  function wantNames(ids) {
    for (const id of ids) {
      if (id && !state.names.has(id) && !names.asking.has(id) && id !== me()) names.wanted.add(id);
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
        for (const u of r.users || []) state.names.set(u.userId, { name: u.name || '', deleted: !!u.deleted });
        // Ids the server does not know keep showing as ids, and are not asked for again.
        for (const id of batch) if (!state.names.has(id)) state.names.set(id, { name: '' });
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
  function refreshNames() {
    const ids = [...new Set([...state.names.keys(), ...names.wanted])].filter((id) => id !== me());
    if (ids.length) askNames(ids);
  }

  function onProfile(f) {
    if (!f.userId) return;
    if (f.userId === me()) {
      setOwnName(f.name || state.auth.name);
    } else {
      state.names.set(f.userId, { name: f.name || '' });
    }
    namesChanged();
  }

  function setOwnName(name) {
    if (!state.auth || !name || state.auth.name === name) return;
    state.auth.name = name;
    localStorage.setItem(AUTH_KEY, JSON.stringify(state.auth));
  }

  // initial is the first character of a name (a whole character: "李" or "Z", not half of an
  // emoji's surrogate pair), for an avatar.
  const initial = (name) => ([...(name || '?')][0] || '?').toUpperCase();

  // systemText is a system message ("alice added carol, dave") with the user ids in it shown as
  // names: the words that are the ids of its sender or of the conversation's members.
  function systemText(c, m) {
    const ids = new Set([m.senderId, ...((c && c.members) || [])]);
    const isId = (w) => ids.has(w) || (state.names.has(w) && !!state.names.get(w).name) || /^u-[0-9a-f]{16}$/.test(w);
    return (m.body || '').split(/(\s+|,)/).map((w) => (w && isId(w) ? nameOf(w) : w)).join('');
  }

  // namesChanged redraws what shows names: the list, the open conversation, the panels.
  function namesChanged() {
    if (!state.auth) return;
    ui.me.textContent = state.auth.name || state.auth.userId;
    renderConvList();
    if (state.openId) {
      showConversation();
      renderMessages();
    }
    renderBlocks();
    groupPicks.render();
    addPicks.render();
  }
  const openConv = () => state.convs.get(state.openId);
  const openWindow = () => state.windows.get(state.openId);

  function announce(text) {
    ui.announcer.textContent = '';
    // A fresh text node after clearing makes screen readers speak repeated texts too.
    setTimeout(() => { ui.announcer.textContent = text; }, 30);
  }

  // ---- Sign-in ---------------------------------------------------------------------------------

  function loadAuth() {
    try {
      const a = JSON.parse(localStorage.getItem(AUTH_KEY));
      if (a && typeof a.token === 'string' && typeof a.userId === 'string') return a;
    } catch { /* a corrupt entry is the same as none */ }
    return null;
  }

  async function signIn(ev) {
    ev.preventDefault();
    const name = ui.loginName.value.trim();
    ui.loginError.textContent = '';
    ui.loginSubmit.disabled = true;
    try {
      const resp = await fetch('/api/login', {
        method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ name }),
      });
      const body = await resp.json().catch(() => ({}));
      if (!resp.ok) throw new Error(body.error || `sign-in failed (${resp.status})`);
      state.auth = { token: body.token, userId: body.userId, name: body.name };
      localStorage.setItem(AUTH_KEY, JSON.stringify(state.auth));
      start();
    } catch (err) {
      ui.loginError.textContent = err.message === 'Failed to fetch' ? 'The server cannot be reached.' : err.message;
    } finally {
      ui.loginSubmit.disabled = false;
    }
  }

  function showLogin(message) {
    ui.chatView.hidden = true;
    ui.loginView.hidden = false;
    ui.loginError.textContent = message || '';
    document.title = 'chatd';
    ui.loginName.focus();
  }

  function signOut(message) {
    flushRead();
    if (state.auth) {
      localStorage.removeItem(PENDING_KEY + me());
      localStorage.removeItem(READS_KEY + me());
    }
    localStorage.removeItem(AUTH_KEY);
    state.auth = null;
    disconnect();
    closeMenus();
    for (const d of [ui.confirm, ui.groupInfo, ui.settings, ui.jumpPicker]) if (d.open) d.close();
    hideNotice();
    state.convs.clear();
    state.windows.clear();
    state.pending.clear();
    state.replyTo.clear();
    state.blocks.clear();
    state.presence.clear();
    state.names.clear();
    for (const f of [dmFinder, groupFinder, addFinder, blockFinder]) f.close();
    groupPicks.clear();
    addPicks.clear();
    state.editing = null;
    state.openId = null;
    state.total = 0;
    for (const id of [...notifications.keys()]) closeNotification(id);
    updateTitle();
    ui.convList.replaceChildren();
    ui.list.replaceChildren();
    history.replaceState(null, '', location.pathname);
    showLogin(message);
  }

  function start() {
    ui.loginView.hidden = true;
    ui.chatView.hidden = false;
    ui.me.textContent = state.auth.name || state.auth.userId;
    restorePending();
    showConversation();
    renderConvList();
    connect();
  }

  // ---- Connection ------------------------------------------------------------------------------

  function setStatus(kind, text) {
    ui.status.dataset.state = kind;
    ui.status.textContent = text;
    ui.reconnectNow.hidden = kind !== 'offline';
  }

  function connect() {
    clearTimeout(conn.timer);
    clearInterval(conn.countdown);
    conn.timer = null;
    if (!state.auth || conn.ws) return;
    const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
    // The token travels as a subprotocol, not in the URL: browsers print a failed WebSocket's URL
    // in the console. The server answers 'chatd'.
    const sock = new WebSocket(`${scheme}//${location.host}/ws`, ['chatd', `chatd.token.${state.auth.token}`]);
    conn.ws = sock;
    conn.opened = false;
    setStatus('connecting', conn.attempt ? 'Reconnecting…' : 'Connecting…');
    sock.onopen = () => {
      if (conn.ws !== sock) return;
      conn.opened = true;
      clearInterval(conn.heartbeat);
      conn.heartbeat = setInterval(() => {
        if (conn.ws !== sock) return;
        request({ type: 'ping' }, PONG_TIMEOUT_MS).catch(() => {
          if (conn.ws === sock) sock.close(4000, 'no pong'); // onclose reconnects
        });
      }, HEARTBEAT_MS);
    };
    sock.onmessage = (ev) => {
      if (conn.ws !== sock) return;
      let f;
      try { f = JSON.parse(ev.data); } catch { return; }
      handleFrame(f);
    };
    sock.onclose = (ev) => { if (conn.ws === sock) disconnected(ev); };
  }

  function disconnect() {
    const sock = conn.ws;
    conn.ws = null;
    conn.live = false;
    clearInterval(conn.heartbeat);
    clearTimeout(conn.timer);
    clearInterval(conn.countdown);
    if (sock) sock.close(1000, 'signed out');
    failWaiting();
  }

  function disconnected(ev) {
    const opened = conn.opened;
    conn.ws = null;
    conn.live = false;
    clearInterval(conn.heartbeat);
    failWaiting();
    if (!state.auth) return;
    if (ev.code === 4003) { signOut('You were signed out by the server.'); return; }
    if (!opened) checkToken();
    scheduleReconnect(ev.code === 4029 ? BACKOFF_MAX_MS : 0);
  }

  // scheduleReconnect waits an exponentially growing delay with "equal jitter" (half fixed, half
  // random), so a fleet of pages that lost the same server does not come back in one burst.
  function scheduleReconnect(minDelay) {
    const ceiling = Math.min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** conn.attempt);
    const delay = Math.max(minDelay, ceiling / 2 + Math.random() * ceiling / 2);
    conn.attempt++;
    conn.retryAt = Date.now() + delay;
    conn.timer = setTimeout(connect, delay);
    const tick = () => {
      const s = Math.max(0, Math.ceil((conn.retryAt - Date.now()) / 1000));
      setStatus('offline', `Offline, retrying in ${s} s`);
    };
    tick();
    clearInterval(conn.countdown);
    conn.countdown = setInterval(tick, 1000);
  }

  // checkToken finds out whether a refused WebSocket was refused for the token (browsers hide the
  // HTTP status of a failed upgrade); a 401 from the badge endpoint means sign in again.
  async function checkToken() {
    if (Date.now() - conn.lastTokenCheck < TOKEN_CHECK_EVERY_MS || !state.auth) return;
    conn.lastTokenCheck = Date.now();
    try {
      const resp = await fetch('/api/badge', { headers: { Authorization: `Bearer ${state.auth.token}` } });
      if (resp.status === 401 && state.auth) signOut('Your session has expired. Please sign in again.');
    } catch { /* the server is down; the reconnect loop keeps trying */ }
  }

  function sendFrame(frame) {
    if (!conn.ws || conn.ws.readyState !== WebSocket.OPEN) return false;
    conn.ws.send(JSON.stringify(frame));
    return true;
  }

  // request sends a frame with a fresh id and resolves with the reply that echoes it; an error
  // frame, a timeout or a lost connection rejects with a RequestError.
  function request(frame, timeout = REQUEST_TIMEOUT_MS) {
    return new Promise((resolve, reject) => {
      const id = `r${conn.nextId++}`;
      if (!sendFrame({ ...frame, id })) {
        reject(new RequestError('offline', 'not connected', true));
        return;
      }
      const timer = setTimeout(() => {
        conn.waiting.delete(id);
        reject(new RequestError('timeout', 'no answer from the server', true));
      }, timeout);
      conn.waiting.set(id, { resolve, reject, timer });
    });
  }

  function failWaiting() {
    const waiting = [...conn.waiting.values()];
    conn.waiting.clear();
    for (const w of waiting) {
      clearTimeout(w.timer);
      w.reject(new RequestError('disconnected', 'the connection was lost', true));
    }
  }

  function handleFrame(f) {
    const w = f.id && conn.waiting.get(f.id);
    if (w) {
      conn.waiting.delete(f.id);
      clearTimeout(w.timer);
      if (f.type === 'error') w.reject(new RequestError(f.code, f.message, !!f.retryable, f.retryAfterMs || 0));
      else w.resolve(f);
      return;
    }
    switch (f.type) {
      case 'hello': onHello(f); break;
      case 'badge': onBadge(f); break;
      case 'message': onMessage(f); break;
      case 'ack': confirmSend(f.clientMsgId, ackedMessage(f)); break; // an ack that came after its timeout
      case 'conversation': if (f.conversation) onConversation(f.conversation); break;
      case 'conversations': applyConversationList(f.conversations || []); break;
      case 'cursor': onCursor(f); break;
      case 'receipt': onReceipt(f); break;
      case 'typing': onTyping(f); break;
      case 'removed': removeConv(f.conversationId); break;
      case 'hidden': onHidden(f); break;
      case 'deleted': onDeleted(f); break;
      case 'edited': onEdited(f); break;
      case 'reaction': onReaction(f); break;
      case 'changes': onChanges(f); break;
      case 'delivered': onPeerDelivered(f); break;
      case 'presence': onPresence(f); break;
      case 'profile': onProfile(f); break;
      case 'error': ui.sidebarError.textContent = f.message || f.code; break;
      default: break; // frames added to the protocol later are ignored
    }
  }

  function onHello(f) {
    if (f.userId && f.userId !== me()) { signOut('Signed in as another user; please sign in again.'); return; }
    if (f.name) { setOwnName(f.name); ui.me.textContent = f.name; }
    conn.attempt = 0;
    conn.live = true;
    focusSent = undefined; // a new socket shows nothing
    reads.sent.clear(); // the sync reply carries the server's read positions
    setStatus('syncing', 'Syncing…');
    syncAll();
  }

  // syncAll names, per conversation whose window reaches the newest message, the highest seq held;
  // the server replays what came after (up to its limit) and answers with the conversation list.
  async function syncAll() {
    const since = {};
    const versions = {};
    for (const [id, w] of state.windows) {
      if (!w.hasAfter) since[id] = w.hi;
      // The changes (edits, reactions, deletions) made while this page was away, of the messages
      // it holds, come as changes frames before the reply.
      const c = state.convs.get(id);
      if (c) versions[id] = c.heldVersion;
    }
    let reply;
    changesMore.clear();
    try {
      reply = await request({ type: 'sync', since, versions });
    } catch (err) {
      if (err.code !== 'disconnected' && conn.ws) conn.ws.close(1000, 'sync failed'); // start over
      return;
    }
    applyConversationList(reply.conversations || [], { synced: true });
    if (changesMore.size) { syncAll(); return; } // a catch-up stopped at its limit: ask for the rest
    sendFocus(); // a new socket shows nothing until told
    flushDelivered();
    requestPresence();
    if (ui.groupInfo.open) requestGroupPresence();
    refreshNames();
    loadBlocks();
    resendSavedReads();
    setStatus('connected', 'Connected');
    resendFailed();
    for (const [id, w] of state.windows) {
      const c = state.convs.get(id);
      if (c && c.lastSeq > w.hi) w.hasAfter = true; // more than the replay limit was missed
    }
    if (!state.openId) {
      const wanted = hashConversation();
      if (wanted && state.convs.has(wanted)) openConversation(wanted);
    } else if (!state.windows.has(state.openId)) {
      openConversation(state.openId); // opened while offline: load it now
    } else if (state.convs.has(state.openId)) {
      const w = openWindow();
      w.retryAt = 0;
      renderMessages();
      refreshReceipts();
      markVisibleRead();
    }
    renderConvList();
  }

  // hashConversation is the conversation remembered in the address (#c=<id>), so a reload reopens it.
  function hashConversation() {
    try {
      return decodeURIComponent(location.hash.replace(/^#c=/, ''));
    } catch {
      return ''; // a hand-edited address
    }
  }

  // ---- Conversations ---------------------------------------------------------------------------

  function upsertConv(v) {
    let c = state.convs.get(v.id);
    if (!c) {
      c = {
        id: v.id, kind: v.kind, name: v.name || '', members: [], lastSeq: 0, readSeq: 0, unread: 0,
        activity: Date.parse(v.createdAt) || 0, peerReadSeq: 0, groupReads: null, typing: new Map(),
        peerDeliveredSeq: 0, // in a DM, how far the other member's devices have received
        // The change version this page holds of the conversation's messages (see noteVersion):
        // that of the first view of it, no later than any page loaded since (a lower one only
        // brings changes again), then what each sync reply says.
        heldVersion: v.version || 0,
        deletedSeqs: new Set(), // seqs this page saw deleted for everyone, for the quotes of replies to them
        firstSeq: 1, // the oldest seq this user can see; later after "delete conversation for me"
        gone: new Set(), // seqs above readSeq known to be tombstones (deleted for everyone): never unread
      };
      state.convs.set(v.id, c);
    }
    c.kind = v.kind;
    c.name = v.name || '';
    c.members = v.members || [];
    c.createdBy = v.createdBy || '';
    // The newest message, for the list: the view's, unless a push brought a newer one meanwhile.
    const lm = v.lastMessage;
    if (lm && lm.seq > 0 && (!c.last || lm.seq >= c.last.seq)) c.last = listPreview(lm);
    else if (!lm && c.last && c.last.seq <= (v.lastSeq || 0)) c.last = null; // none (deleted for me)
    if (c.last) c.activity = Math.max(c.activity, Date.parse(c.last.createdAt) || 0);
    c.lastSeq = Math.max(c.lastSeq, v.lastSeq || 0);
    c.readSeq = Math.max(c.readSeq, v.readSeq || 0);
    c.unread = v.unread || 0; // the server's exact count
    pruneGone(c);
    return c;
  }

  function onConversation(v) {
    const isNew = !state.convs.has(v.id);
    const c = upsertConv(v);
    if (isNew && c.kind === 'group') announce(`You were added to ${convTitle(c)}`);
    recountTotal();
    renderConvList();
  }

  // applyConversationList applies a conversation list; the one of a sync reply also says which
  // change version the page now holds of each (docs/PROTOCOL.md, sync).
  function applyConversationList(list, { synced = false } = {}) {
    const seen = new Set();
    for (const v of list) {
      const c = upsertConv(v);
      if (synced) c.heldVersion = changesMore.has(c.id) ? changesMore.get(c.id) : v.version || 0;
      seen.add(v.id);
    }
    for (const id of [...state.convs.keys()]) if (!seen.has(id)) removeConv(id);
    recountTotal();
    renderConvList();
  }

  function removeConv(id) {
    state.convs.delete(id);
    state.windows.delete(id);
    state.replyTo.delete(id);
    if (state.openId === id) closeConversation();
    recountTotal();
    renderConvList();
  }

  // listPreview is what the conversation list keeps of a conversation's newest message (the
  // server's lastMessage, or a pushed message): its seq, sender, kind, time and the start of its
  // text on one line.
  function listPreview(m) {
    const text = m.kind === 'deleted' ? '' : (m.body || '').replace(/\s+/g, ' ').trim();
    return { seq: m.seq, senderId: m.senderId || '', kind: m.kind || 'text', createdAt: m.createdAt,
      body: text.length > LIST_PREVIEW_CHARS ? `${text.slice(0, LIST_PREVIEW_CHARS)}…` : text };
  }

  // notePreview keeps m as c's newest message when it is (a message push, a replay, a page).
  function notePreview(c, m) {
    if (!c || !(m.seq >= c.firstSeq) || (c.last && m.seq < c.last.seq)) return;
    c.last = listPreview(m);
    c.activity = Math.max(c.activity, Date.parse(m.createdAt) || Date.now());
  }

  // changePreview applies an edit or a deletion of seq to the list's preview, when it shows seq.
  function changePreview(convId, seq, change) {
    const c = state.convs.get(convId);
    if (!c || !c.last || c.last.seq !== seq) return;
    change(c.last);
    renderConvList();
  }

  function recountTotal() {
    let total = 0;
    for (const c of state.convs.values()) total += c.unread;
    state.total = total;
    updateTitle();
  }

  // Unread is lastSeq - readSeq less the tombstones in between (docs/PROTOCOL.md, Unread). Views
  // and badge frames carry the exact count; between them the page keeps its own from the pushes,
  // knowing the tombstones it has seen by seq in c.gone.

  // goneIn counts the known tombstones of c with a seq in (lo, hi].
  function goneIn(c, lo, hi) {
    let n = 0;
    for (const s of c.gone) if (s > lo && s <= hi) n++;
    return n;
  }

  // pruneGone forgets tombstones at or below the read position: they count for nothing any more.
  function pruneGone(c) {
    for (const s of c.gone) if (s <= c.readSeq) c.gone.delete(s);
  }

  // rememberGone notes the tombstones of a history page or sync replay; the count is left alone
  // (views and badges that came since they were deleted already leave them out).
  function rememberGone(c, m) {
    if (c && m && m.kind === 'deleted' && m.seq > c.readSeq) c.gone.add(m.seq);
  }

  // applyOwnRead moves readSeq for a read of this user (this page's or another device's): the seqs
  // read over that are not known tombstones are no longer unread. The badge that follows is exact.
  // A cursor ahead of lastSeq (its messages not here yet) subtracts only what is counted; those
  // messages add nothing when they come, as they are at or below readSeq.
  function applyOwnRead(c, newRead) {
    const oldRead = c.readSeq;
    if (newRead <= oldRead) return;
    const upto = Math.min(newRead, c.lastSeq);
    if (upto > oldRead) c.unread = Math.max(0, c.unread - ((upto - oldRead) - goneIn(c, oldRead, upto)));
    c.readSeq = newRead;
    pruneGone(c);
  }

  function updateTitle() {
    document.title = state.total > 0 ? `(${state.total}) chatd` : 'chatd';
    drawFavicon(state.total);
  }

  // drawFavicon draws the tab's icon on a canvas: the page's blue square, with a red badge of the
  // total unread when there is any ("99+" past 99). The CSP allows data: images, and no file is
  // fetched.
  let faviconDrawn = -1;
  function drawFavicon(total) {
    const n = state.auth ? total : 0;
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

  function onBadge(f) {
    if (typeof f.total === 'number') state.total = f.total;
    const c = f.conversationId && state.convs.get(f.conversationId);
    if (f.conversationId && !c) refreshListSoon();
    if (c) {
      if (typeof f.unread === 'number') c.unread = f.unread;
      c.readSeq = Math.max(c.readSeq, f.readSeq || 0);
      c.lastSeq = Math.max(c.lastSeq, f.lastSeq || 0);
      pruneGone(c);
    }
    updateTitle();
    renderConvList();
  }

  let listTimer = null;
  function refreshListSoon() {
    clearTimeout(listTimer);
    listTimer = setTimeout(async () => {
      try {
        const r = await request({ type: 'list_conversations' });
        applyConversationList(r.conversations || []);
        if (state.openId) showConversation();
      } catch { /* the next sync brings the list */ }
    }, 200);
  }

  // onHidden: the user deleted the conversation for themselves (here or on another device). It
  // leaves the list until someone writes in it again, and its history now starts after seq.
  function onHidden(f) {
    const c = state.convs.get(f.conversationId);
    if (!c) return;
    c.firstSeq = Math.max(c.firstSeq, (f.seq || 0) + 1);
    c.unread = 0;
    c.last = null; // its history, for this user, is gone
    c.hidden = true; // until a new message brings it back (which notifies nobody)
    state.windows.delete(c.id);
    if (state.openId === c.id) closeConversation();
    recountTotal();
    renderConvList();
  }

  // onDeleted: a message was deleted for everyone; it stays in place as a tombstone.
  // No badge comes with it: an unread message that became a tombstone is one less unread, once per
  // seq, whether or not it is loaded. One above lastSeq is remembered, and adds nothing when it comes.
  function onDeleted(f) {
    const c = state.convs.get(f.conversationId);
    if (c && f.seq > 0 && !c.gone.has(f.seq)) {
      if (f.seq > c.readSeq) c.gone.add(f.seq);
      if (f.seq > c.readSeq && f.seq <= c.lastSeq) c.unread = Math.max(0, c.unread - 1);
      recountTotal();
      renderConvList();
    }
    if (c) c.deletedSeqs.add(f.seq); // replies quoting it show the quote as deleted
    changePreview(f.conversationId, f.seq, (p) => { p.kind = 'deleted'; p.body = ''; });
    applyChange(f.conversationId, f.seq, f.version, (m) => {
      m.kind = 'deleted';
      m.body = '';
      delete m.reactions;
      delete m.editedAt;
      delete m.quote;
    }, true);
    // Replies to it that are on screen show their quote as deleted, also when it is not loaded.
    if (f.conversationId === state.openId) renderMessages();
  }

  // ---- Changes of messages: edits, reactions, deletions -------------------------------------

  // A message keeps its seq; its text, reactions and kind may change, each change with the
  // conversation's next version. The page keeps, per seq, the state with the higher version, so
  // a change that arrives twice (a live frame, then a sync catch-up) or late is applied once.

  const changesMore = new Map(); // conversation id -> version a changes frame with hasMore stopped at

  // noteVersion advances the version the page holds of c, but only by one: a gap means a change
  // this page has not seen, which the next sync brings (docs/PROTOCOL.md, sync).
  function noteVersion(c, version) {
    if (c && version && version === c.heldVersion + 1) c.heldVersion = version;
  }

  // applyChange changes the held message seq of a conversation with change when version is newer
  // than what the page holds of it; a message the page does not hold comes right in its next page.
  function applyChange(convId, seq, version, change, force = false) {
    noteVersion(state.convs.get(convId), version);
    const w = state.windows.get(convId);
    const m = w && w.bySeq.get(seq);
    if (!m) return;
    if (version ? (m.version || 0) >= version : !force) return;
    const next = { ...m, reactions: (m.reactions || []).map((r) => ({ ...r })) };
    change(next);
    if (version) next.version = version;
    w.bySeq.set(seq, next);
    if (convId === state.openId) renderMessages();
  }

  function onEdited(f) {
    changePreview(f.conversationId, f.seq, (p) => { if (p.kind === 'text') Object.assign(p, listPreview({ ...p, body: f.body })); });
    applyChange(f.conversationId, f.seq, f.version, (m) => {
      if (m.kind !== 'text') return;
      m.body = f.body || '';
      m.editedAt = f.editedAt;
    });
  }

  // onReaction applies one member's reaction: the emoji's count, and "me" when it is this user's.
  function onReaction(f) {
    applyChange(f.conversationId, f.seq, f.version, (m) => {
      let r = m.reactions.find((x) => x.emoji === f.emoji);
      if (!r) { r = { emoji: f.emoji, count: 0 }; m.reactions.push(r); }
      r.count = f.count || 0;
      if (f.userId === me()) r.me = !f.remove;
      m.reactions = m.reactions.filter((x) => x.count > 0);
    });
  }

  // onChanges: a sync catch-up, the held messages as they are now; each replaces the held one
  // when newer.
  function onChanges(f) {
    const w = state.windows.get(f.conversationId);
    for (const m of f.messages || []) {
      changePreview(f.conversationId, m.seq, (p) => Object.assign(p, listPreview(m)));
      const held = w && w.bySeq.get(m.seq);
      if (m.kind === 'deleted') onDeleted({ conversationId: f.conversationId, seq: m.seq, version: 0 });
      if (held && (m.version || 0) > (held.version || 0)) w.bySeq.set(m.seq, m);
    }
    if (f.hasMore) changesMore.set(f.conversationId, f.version);
    if (f.conversationId === state.openId) renderMessages();
  }

  function onCursor(f) {
    const c = state.convs.get(f.conversationId);
    if (!c) return;
    applyOwnRead(c, f.readSeq || 0);
    recountTotal();
    renderConvList();
    if (c.id === state.openId) updateCue(); // read on another device: fewer are new here too
  }

  function onReceipt(f) {
    const c = state.convs.get(f.conversationId);
    if (!c || f.userId === me()) return;
    if (c.kind === 'dm') {
      c.peerReadSeq = Math.max(c.peerReadSeq, f.readSeq || 0);
      if (c.id === state.openId) renderMessages();
    } else if (c.id === state.openId && c.groupReads && (f.readSeq || 0) >= c.groupReads.from) {
      refreshReceiptsSoon(); // a count of an own message on screen grew
    }
  }

  function onTyping(f) {
    const c = state.convs.get(f.conversationId);
    if (!c || f.userId === me()) return;
    c.typing.set(f.userId, Date.now() + TYPING_SHOW_MS);
    renderTyping();
    renderConvList();
    setTimeout(() => { renderTyping(); renderConvList(); }, TYPING_SHOW_MS + 50);
  }

  function typers(c) {
    const now = Date.now();
    return [...c.typing].filter(([, until]) => until > now).map(([u]) => u);
  }

  function renderTyping() {
    const c = openConv();
    const who = c ? typers(c) : [];
    ui.typing.textContent = who.length === 0 ? ''
      : who.length === 1 ? `${nameOf(who[0])} is typing…` : `${who.map(nameOf).join(', ')} are typing…`;
  }

  // openDM opens a DM from the "Message a user" box: with the person picked in its list of
  // people found by name, else with the one whose name is exactly what was typed, else with the
  // user whose id was typed.
  async function openDM(ev) {
    ev.preventDefault();
    ui.sidebarError.textContent = '';
    if (!ui.dmUser.value.trim()) return;
    const peer = dmFinder.chosen();
    if (!peer) { ui.sidebarError.textContent = PICK_SOMEONE; return; }
    await openDMWith(peer);
  }

  async function openDMWith(peer) {
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

  // ---- Find a person ---------------------------------------------------------------------------

  const PICK_SOMEONE = 'Pick someone from the list, or type a user id.';

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
      for (const u of users) state.names.set(u.userId, { name: u.name || '' });
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
  function membersTyped(picked, finder, input) {
    const one = finder.named();
    const typed = one ? [one] : input.value.split(/[,\s]+/).map(userIdOf).filter(Boolean);
    return [...new Set([...picked.ids(), ...typed])];
  }

  // ---- Your name ----------------------------------------------------------------------------

  async function saveName(ev) {
    ev.preventDefault();
    const name = ui.nameInput.value.trim().replace(/\s+/g, ' ');
    if (!name) return;
    ui.nameStatus.textContent = 'Saving…';
    try {
      await request({ type: 'set_name', name });
    } catch (err) {
      ui.nameStatus.textContent = failureText('Could not change your name', err); // the text is kept to correct
      return;
    }
    setOwnName(name); // the profile push that follows says the same
    ui.nameInput.value = name;
    ui.nameStatus.textContent = 'Saved. Others see your new name.';
    namesChanged();
  }

  async function createGroup(ev) {
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
      // not_found is also what a user someone blocks hears about them (PROTOCOL.md, block_user):
      // the page says no more than the server does.
      ui.sidebarError.textContent = err.code === 'not_found' ? `You cannot message ${nameOf(peer)}.` : errorText(err);
    }
  }

  function errorText(err) {
    if (err.code === 'offline' || err.code === 'disconnected') return 'Not connected; try again in a moment.';
    return namedText(err.message || err.code);
  }

  // namedText puts the display names the page knows in place of the user ids in a server's words
  // ("no such user: mary-jane"): a person is never shown as a bare id where their name is known.
  function namedText(text) {
    return text.replace(/[^\s:,;()"]+/g, (word) => {
      const p = state.names.get(word);
      return p && !p.deleted && p.name ? p.name : word;
    });
  }

  // renderConvList updates the list in place, so focus stays on the item a keyboard user is on.
  function renderConvList() {
    renderGroupInfo(); // members change with the list (a join, a leave, a removal)
    const muted = state.auth ? mutedSet() : new Set();
    const convs = [...state.convs.values()].filter((c) => c.lastSeq >= c.firstSeq || c.lastSeq === 0).sort((a, b) => b.activity - a.activity || (a.id < b.id ? -1 : 1));
    ui.convEmpty.hidden = convs.length > 0;
    renderBackBadge();
    reconcile(ui.convList, convs.map((c) => ({
      key: c.id,
      sig: [convTitle(c), c.unread, c.id === state.openId, typers(c).length, c.kind, c.members.length,
        previewText(c), c.last ? c.last.createdAt : '', muted.has(c.id)].join('|'),
      build: () => {
        const li = h('li', { class: 'conv-item' }, h('button', {
          type: 'button', class: 'conv', 'data-conv-id': c.id,
          onclick: () => openConversation(c.id, { focus: true }),
          onkeydown: (e) => moveInList(e),
        }));
        fillConvItem(li, c, muted.has(c.id));
        return li;
      },
      update: (li) => fillConvItem(li, c, muted.has(c.id)),
    })));
  }

  // renderBackBadge counts the unread messages of the other conversations on the back button: on a
  // phone the open conversation covers the list, and this is where activity elsewhere shows.
  function renderBackBadge() {
    let n = 0;
    for (const c of state.convs.values()) if (c.id !== state.openId) n += c.unread;
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
    button.setAttribute('aria-label', [title, time, sub, muted ? 'muted' : '', c.unread > 0 ? `${badge} unread` : ''].filter(Boolean).join(', '));
    if (c.id === state.openId) button.setAttribute('aria-current', 'true');
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
          ...(c.unread > 0 ? [' ', h('span', { class: 'badge', 'aria-hidden': 'true' }, badge)] : []))));
  }

  // previewText is a list entry's second line: "<sender>: <text>" of the newest message ("You"
  // for your own), a system message's text, or "This message was deleted"; '' when none is known.
  function previewText(c) {
    const m = c.last;
    if (!m) return '';
    if (m.kind === 'deleted') return 'This message was deleted';
    if (m.kind === 'system') return systemText(c, m);
    return `${m.senderId === me() ? 'You' : nameOf(m.senderId)}: ${m.body}`;
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

  // ---- Message windows -------------------------------------------------------------------------

  // A window holds the messages lo..hi of one conversation with no gap. Seqs are gapless on the
  // server (deleted messages stay as tombstones), so lo > firstSeq means there is more above and
  // hi < lastSeq means there is more below.
  function newWindow(lo, hi) {
    return { lo, hi, bySeq: new Map(), hasBefore: false, hasAfter: false, loading: false, retryAt: 0 };
  }

  function windowFromPage(c, page) {
    const msgs = page.messages;
    const w = msgs.length ? newWindow(msgs[0].seq, msgs[0].seq - 1) : newWindow(c.lastSeq + 1, c.lastSeq);
    for (const m of msgs) {
      if (m.seq !== w.hi + 1) break; // never hold a gap
      w.bySeq.set(m.seq, m);
      w.hi = m.seq;
    }
    setEnds(c, w);
    return w;
  }

  function setEnds(c, w) {
    w.hasBefore = w.lo > c.firstSeq;
    w.hasAfter = w.hi < c.lastSeq;
  }

  async function fetchPage(convId, anchor) {
    const r = await request({ type: 'history', conversationId: convId, limit: PAGE_SIZE, ...anchor });
    const page = { messages: r.messages || [], lastSeq: r.lastSeq || 0 };
    const c = state.convs.get(convId);
    if (c) {
      c.lastSeq = Math.max(c.lastSeq, page.lastSeq);
      // firstSeq is 0 when nothing is visible: everything up to lastSeq was deleted for this user.
      c.firstSeq = r.firstSeq || page.lastSeq + 1;
    }
    for (const m of page.messages) {
      confirmFromHistory(m);
      rememberGone(c, m);
      if (m.kind === 'deleted' && c) c.deletedSeqs.add(m.seq);
    }
    if (page.messages.length) {
      const newest = page.messages[page.messages.length - 1];
      noteReceived(convId, newest.seq);
      if (c && c.last && newest.seq > c.last.seq) { notePreview(c, newest); renderConvList(); }
    }
    return page;
  }

  // deliver puts a live message into its conversation's window, or keeps it until the window that
  // is being loaded arrives.
  function deliver(m) {
    const buf = state.buffers.get(m.conversationId);
    if (buf) buf.push(m);
    const w = state.windows.get(m.conversationId);
    if (w) insertLive(w, m);
  }

  function insertLive(w, m) {
    if (m.seq < w.lo) return;
    if (m.seq <= w.hi) { // a duplicate (replay, retry): same seq, same place, the newer state kept
      const held = w.bySeq.get(m.seq);
      if (!held || (m.version || 0) >= (held.version || 0)) w.bySeq.set(m.seq, { ...m, quote: m.quote || (held && held.quote) });
      return;
    }
    if (w.hasAfter) return; // the window is not at the newest messages; the cue offers them
    if (m.seq === w.hi + 1) {
      w.bySeq.set(m.seq, m);
      w.hi = m.seq;
      if (w.hi - w.lo + 1 > MAX_WINDOW + PAGE_SIZE && nearBottom()) trimTop(w);
      return;
    }
    w.hasAfter = true; // a gap: fetch it rather than show messages out of order
    if (state.windows.get(state.openId) === w) loadNewer();
  }

  function trimTop(w) {
    while (w.hi - w.lo + 1 > MAX_WINDOW) w.bySeq.delete(w.lo++);
    w.hasBefore = true;
  }

  function trimBottom(w) {
    while (w.hi - w.lo + 1 > MAX_WINDOW) w.bySeq.delete(w.hi--);
    w.hasAfter = true;
  }

  // replaceWindow loads a new window for the open conversation (latest page, or around a seq)
  // and applies the live messages that arrived meanwhile.
  async function replaceWindow(convId, anchor, scroll) {
    const view = ++state.view;
    const buffered = [];
    state.buffers.set(convId, buffered);
    ui.loading.hidden = false;
    let page;
    try {
      page = await fetchPage(convId, anchor);
    } catch (err) {
      if (view === state.view) {
        ui.loading.hidden = true;
        ui.meta.textContent = `Could not load messages: ${errorText(err)}`;
      }
      return;
    } finally {
      if (state.buffers.get(convId) === buffered) state.buffers.delete(convId);
    }
    const c = state.convs.get(convId);
    if (view !== state.view || !c) return;
    const w = windowFromPage(c, page);
    for (const m of buffered) insertLive(w, m);
    state.windows.set(convId, w);
    ui.loading.hidden = true;
    renderMessages(scroll);
    refreshReceipts();
  }

  async function loadOlder() {
    const w = openWindow();
    if (!w || w.loading || !w.hasBefore) return;
    w.loading = true;
    ui.loading.hidden = false;
    try {
      const page = await fetchPage(state.openId, { before: w.lo });
      for (let i = page.messages.length - 1; i >= 0; i--) {
        const m = page.messages[i];
        if (m.seq !== w.lo - 1) break;
        w.bySeq.set(m.seq, m);
        w.lo = m.seq;
      }
      setEnds(state.convs.get(state.openId), w);
      if (w.hi - w.lo + 1 > MAX_WINDOW) trimBottom(w);
    } catch {
      w.retryAt = Date.now() + PAGE_RETRY_MS; // still loadable; a later scroll or the sync retries
    }
    w.loading = false;
    ui.loading.hidden = true;
    if (openWindow() === w) {
      renderMessages();
      refreshReceiptsSoon(); // own messages of the new page need their ticks
    }
  }

  async function loadNewer() {
    const w = openWindow();
    if (!w || w.loading || !w.hasAfter) return;
    w.loading = true;
    try {
      const page = await fetchPage(state.openId, { after: w.hi });
      for (const m of page.messages) {
        if (m.seq !== w.hi + 1) continue;
        w.bySeq.set(m.seq, m);
        w.hi = m.seq;
      }
      setEnds(state.convs.get(state.openId), w);
      if (w.hi - w.lo + 1 > MAX_WINDOW) trimTop(w);
    } catch {
      w.retryAt = Date.now() + PAGE_RETRY_MS;
    }
    w.loading = false;
    if (openWindow() === w) {
      renderMessages();
      refreshReceiptsSoon();
    }
  }

  function maybeLoadMore() {
    const w = openWindow();
    if (!w || w.loading || !conn.live || Date.now() < w.retryAt) return;
    const sc = ui.scroller;
    if (sc.scrollTop < EDGE_PX && w.hasBefore) loadOlder();
    else if (sc.scrollHeight - sc.scrollTop - sc.clientHeight < EDGE_PX && w.hasAfter) loadNewer();
  }

  function nearBottom() {
    const sc = ui.scroller;
    return sc.scrollHeight - sc.scrollTop - sc.clientHeight < 60;
  }

  // ---- Opening a conversation ------------------------------------------------------------------

  function openConversation(id, opts = {}) {
    const c = state.convs.get(id);
    if (!c) return;
    flushRead();
    if (state.editing && state.editing.convId !== id) cancelEdit({ focus: false });
    state.openId = id;
    sendFocus();
    closeNotification(id);
    if (c.kind === 'dm') requestPresence();
    history.replaceState(null, '', `#c=${encodeURIComponent(id)}`);
    document.body.classList.add('show-conv');
    showConversation();
    renderConvList();
    ui.list.replaceChildren();
    state.divider = c.unread > 0 ? { convId: id, afterSeq: c.readSeq } : null;
    const w = state.windows.get(id);
    if (c.unread > 0) {
      replaceWindow(id, { around: c.readSeq + 1 }, { toSeq: c.readSeq + 1, divider: true });
    } else if (w && !w.hasAfter) {
      state.view++;
      renderMessages({ bottom: true });
      refreshReceipts();
    } else {
      replaceWindow(id, {}, { bottom: true });
    }
    if (opts.focus) ui.input.focus({ preventScroll: true });
  }

  function closeConversation() {
    flushRead();
    cancelEdit({ focus: false });
    if (ui.jumpPicker.open) ui.jumpPicker.close();
    state.openId = null;
    sendFocus();
    state.view++;
    document.body.classList.remove('show-conv');
    history.replaceState(null, '', location.pathname);
    showConversation();
    renderConvList();
  }

  function showConversation() {
    const c = openConv();
    ui.noConv.hidden = !!c;
    ui.convBody.hidden = !c;
    if (!c) return;
    ui.title.textContent = convTitle(c);
    const peer = dmPeer(c);
    const presence = c.kind === 'dm' ? presenceText(peer) : '';
    ui.meta.textContent = c.kind === 'group' ? `${c.members.length} members: ${c.members.map(nameOf).join(', ')}`
      : [state.blocks.has(peer) ? `Direct message · you blocked ${nameOf(peer)}` : 'Direct message', presence].filter(Boolean).join(' · ');
    ui.meta.dataset.presence = presence;
    renderReplyBar();
    renderEditBar();
    ui.scroller.setAttribute('aria-label', `Messages with ${convTitle(c)}`);
    renderTyping();
  }

  function jumpTo(seq) {
    const c = openConv();
    if (!c) return;
    replaceWindow(c.id, { around: seq }, { toSeq: seq, highlight: true });
  }

  // ---- Jump picker -----------------------------------------------------------------------------

  // The Jump button opens a small picker: the first unread message, a date, the oldest or the
  // newest message. Choosing (with the mouse or the arrow keys) moves nothing; only its Jump
  // button does. Each jump loads one window of range pages around its target, like a reply's quote.

  function openJumpPicker() {
    const c = openConv();
    if (!c) return;
    closeMenus();
    const unread = c.unread > 0;
    ui.jumpUnread.disabled = !unread;
    ui.jumpUnreadLabel.textContent = unread ? `First unread message (${c.unread} unread)` : 'First unread message (none)';
    ui.jumpDate.max = dayKey(new Date());
    if (!ui.jumpDate.value) ui.jumpDate.value = dayKey(new Date());
    ui.jumpForm.elements.target.value = unread ? 'unread' : 'date';
    ui.jumpStatus.textContent = '';
    ui.jumpGo.disabled = false;
    ui.jumpPicker.showModal();
    (unread ? ui.jumpUnread : ui.jumpDate).focus();
  }

  async function confirmJump(ev) {
    ev.preventDefault();
    const c = openConv();
    if (!c) { ui.jumpPicker.close(); return; }
    const target = ui.jumpForm.elements.target.value;
    ui.jumpStatus.textContent = '';
    if (target === 'unread') {
      ui.jumpPicker.close();
      if (c.unread <= 0) return;
      state.following = false;
      state.divider = { convId: c.id, afterSeq: c.readSeq };
      replaceWindow(c.id, { around: c.readSeq + 1 }, { toSeq: c.readSeq + 1, divider: true });
    } else if (target === 'oldest') {
      ui.jumpPicker.close();
      state.following = false;
      replaceWindow(c.id, { after: Math.max(0, c.firstSeq - 1) }, { top: true });
    } else if (target === 'newest') {
      ui.jumpPicker.close();
      state.following = true;
      replaceWindow(c.id, {}, { bottom: true });
    } else {
      const [y, mo, d] = ui.jumpDate.value.split('-').map(Number);
      if (!y || !mo || !d) { ui.jumpStatus.textContent = 'Pick a date.'; return; }
      const day = new Date(y, mo - 1, d); // local midnight: the day as the user's calendar has it
      ui.jumpGo.disabled = true;
      ui.jumpStatus.textContent = 'Finding…';
      let seq;
      try {
        seq = await firstSeqSince(c, day.getTime());
      } catch (err) {
        ui.jumpStatus.textContent = failureText('Could not look for that date', err);
        return;
      } finally {
        ui.jumpGo.disabled = false;
      }
      if (state.openId !== c.id) { ui.jumpPicker.close(); return; }
      if (!seq) {
        ui.jumpStatus.textContent = `No messages on or after ${day.toLocaleDateString([], { day: 'numeric', month: 'long', year: 'numeric' })}.`;
        return;
      }
      ui.jumpPicker.close();
      state.following = false;
      replaceWindow(c.id, { around: seq }, { toSeq: seq, dayStart: true, highlight: true });
      announce(`Showing messages from ${dayLabel(day)}`);
    }
  }

  // firstSeqSince finds the first message of c written at or after time t (ms), or 0 when there
  // is none: a binary search over seqs with one range page per step (seqs and their times grow
  // together), so a conversation of a million messages takes about fifteen pages.
  async function firstSeqSince(c, t) {
    let lo = c.firstSeq;
    let hi = c.lastSeq;
    let found = 0;
    while (lo <= hi) {
      const mid = Math.floor((lo + hi) / 2);
      const page = await fetchPage(c.id, { around: mid });
      const msgs = page.messages.filter((m) => m.seq >= lo && m.seq <= hi);
      if (!msgs.length) break;
      const i = msgs.findIndex((m) => Date.parse(m.createdAt) >= t);
      if (i === -1) { lo = msgs[msgs.length - 1].seq + 1; continue; }
      found = msgs[i].seq;
      if (i > 0) break; // the message before it, in this page, is older: found is the first
      hi = msgs[0].seq - 1;
    }
    return found;
  }

  // ---- Rendering messages ----------------------------------------------------------------------

  // reconcile makes parent's children the keyed items in order, reusing elements whose signature
  // did not change (or updating them in place, for items that can), so scrolling, focus and
  // screen-reader position survive updates.
  function reconcile(parent, items) {
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
  function morph(a, b) {
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

  function renderMessages(scroll = {}) {
    const c = openConv();
    const w = openWindow();
    const sc = ui.scroller;
    if (!c || !w) return;
    const stick = state.following;
    const anchor = scrollAnchor();
    const myId = me();

    const lastMine = lastOwnSeq(w);
    const items = [];
    const today = dayKey(new Date());
    let day = null;
    // A separator opens each day's messages; its key is the day, so each day has one.
    const startDay = (iso) => {
      const d = new Date(iso);
      const key = Number.isNaN(d.getTime()) ? day : dayKey(d);
      if (!key || key === day) return;
      day = key;
      const label = dayLabel(d);
      items.push({ key: `d${key}`, sig: `${label}|${today}`, build: () => dateItem(key, label) });
    };
    for (let s = w.lo; s <= w.hi; s++) {
      const m = w.bySeq.get(s);
      if (!m) continue;
      startDay(m.createdAt);
      if (state.divider && state.divider.convId === c.id && s === state.divider.afterSeq + 1) {
        items.push({ key: 'divider', sig: 'divider', build: dividerItem });
      }
      const mine = m.senderId === myId;
      const status = mine ? sentStatus(c, m, s === lastMine) : null;
      const quote = m.replyTo && m.kind === 'text' ? quoteOf(w, m.replyTo, m.quote) : null;
      items.push({
        key: `s${s}`, sig: [m.kind, m.body, m.editedAt, reactionsSig(m), status && status.sig, status && status.title, quote && quote.sig,
          m.kind === 'system' ? systemText(c, m) : nameOf(m.senderId)].join('|'),
        build: () => messageItem(c, m, status, quote),
        update: (e) => morph(e, messageItem(c, m, status, quote)),
      });
    }
    if (!w.hasAfter) {
      for (const p of state.pending.values()) {
        if (p.convId !== c.id) continue;
        startDay(p.createdAt);
        const quote = p.replyTo ? quoteOf(w, p.replyTo) : null;
        items.push({ key: `p${p.clientMsgId}`, sig: `${p.state}|${p.error || ''}|${quote ? quote.sig : ''}`, build: () => pendingItem(c, p, quote),
          update: (e) => morph(e, pendingItem(c, p, quote)) });
      }
    }
    reconcile(ui.list, items);
    ui.list.dataset.firstSeq = String(w.bySeq.size ? w.lo : 0);
    ui.list.dataset.lastSeq = String(w.bySeq.size ? w.hi : 0);
    ui.list.dataset.hasBefore = String(w.hasBefore);
    ui.list.dataset.hasAfter = String(w.hasAfter);

    if (scroll.toSeq) {
      // The message, or what opens it: the new-messages line, or its day's separator.
      const msg = ui.list.querySelector(`:scope > li[data-seq="${scroll.toSeq}"]`);
      const before = msg && msg.previousElementSibling;
      const opener = scroll.divider ? ui.list.querySelector('[data-key="divider"]')
        : scroll.dayStart && before && before.classList.contains('day') ? before : null;
      const e = opener || msg;
      if (e) {
        const atTop = scroll.divider || scroll.dayStart;
        sc.scrollTop += e.getBoundingClientRect().top - sc.getBoundingClientRect().top - (atTop ? 4 : sc.clientHeight / 3);
        if (scroll.highlight && msg) flash(msg);
      }
      state.following = nearBottom();
    } else if (scroll.top) {
      sc.scrollTop = 0;
      state.following = nearBottom();
    } else if (scroll.bottom) {
      sc.scrollTop = sc.scrollHeight;
      state.following = true;
    } else if (stick && !w.hasAfter) {
      followNewest(c);
    } else if (anchor && anchor.e.isConnected) {
      sc.scrollTop += anchor.e.getBoundingClientRect().top - anchor.top;
    }
    observeMessages();
    updateCue();
    renderReplyBar(); // the answered message may have been loaded or deleted meanwhile
    // After layout, look at what the user sees: mark it read, and fetch more if an edge that has
    // more is in view (a short page, or a gap found after a reconnect scrolls nothing).
    setTimeout(() => { maybeLoadMore(); markVisibleRead(); }, 0);
  }

  // followNewest keeps a conversation that was at its newest message there, but never scrolls past
  // a message the user has not had on screen: after a long outage the replayed backlog stops with
  // its first unseen message at the top, and the cue counts the rest.
  function followNewest(c) {
    const sc = ui.scroller;
    let top = sc.scrollHeight - sc.clientHeight;
    const seen = seenSeq(c);
    for (const e of ui.list.querySelectorAll('li[data-seq]')) {
      if (Number(e.dataset.seq) <= seen || e.dataset.sender === me()) continue;
      top = Math.min(top, sc.scrollTop + e.getBoundingClientRect().top - sc.getBoundingClientRect().top - 8);
      break;
    }
    if (top > sc.scrollTop) sc.scrollTop = top;
  }

  // updateCue shows, over the bottom of the messages, how many arrived below what the user has seen
  // ("3 new messages"), or "Jump to latest" when the window does not reach the newest message.
  function updateCue() {
    const c = openConv();
    const w = openWindow();
    if (!c || !w) { ui.jumpLatest.hidden = true; return; }
    const fresh = Math.max(0, c.lastSeq - seenSeq(c));
    const hide = !w.hasAfter && (fresh === 0 || nearBottom());
    const text = fresh > 0 ? `${fresh} new message${fresh === 1 ? '' : 's'} ↓` : 'Jump to latest ↓';
    if (ui.jumpLatest.textContent !== text) ui.jumpLatest.textContent = text;
    ui.jumpLatest.hidden = hide;
  }

  function jumpToLatest() {
    const c = openConv();
    const w = openWindow();
    if (!c || !w) return;
    state.following = true;
    if (w.hasAfter) replaceWindow(c.id, {}, { bottom: true });
    else ui.scroller.scrollTop = ui.scroller.scrollHeight;
  }

  // scrollAnchor is the first item in view that keeps its place among its neighbours; a day's
  // separator does not (it moves up when older messages of that day are loaded above it).
  function scrollAnchor() {
    const top = ui.scroller.getBoundingClientRect().top;
    for (const e of ui.list.children) {
      if (e.classList.contains('day')) continue;
      const r = e.getBoundingClientRect();
      if (r.bottom > top) return { e, top: r.top };
    }
    return null;
  }

  function flash(e) {
    e.classList.add('flash');
    setTimeout(() => e.classList.remove('flash'), 1600);
  }

  function oldestUnreadOwnSeq(c, w) {
    for (let s = Math.max(w.lo, c.peerReadSeq + 1); s <= w.hi; s++) {
      const m = w.bySeq.get(s);
      if (m && m.senderId === me() && m.kind === 'text') return s;
    }
    return 0;
  }

  function firstOwnSeq(w) {
    for (let s = w.lo; s <= w.hi; s++) {
      const m = w.bySeq.get(s);
      if (m && m.senderId === me() && m.kind === 'text') return s;
    }
    return 0;
  }

  function lastOwnSeq(w) {
    for (let s = w.hi; s >= w.lo; s--) {
      const m = w.bySeq.get(s);
      if (m && m.senderId === me() && m.kind === 'text') return s;
    }
    return 0;
  }

  // groupReadBy says who has read an own message of a group: exactly, with their ids, from the
  // readers' positions (groups of up to 32); else at least the count of the next message asked about
  // (a cursor only moves forward, so whoever read a message read every one before it).
  function groupReadBy(c, seq) {
    const g = c.groupReads;
    if (!g || seq < g.from) return { n: 0, readers: [] };
    if (g.readers) {
      const readers = [...g.readers].filter(([, readSeq]) => readSeq >= seq).map(([u]) => u);
      return { n: readers.length, readers };
    }
    const asked = g.counts.find(([s]) => s >= seq);
    return { n: asked ? asked[1] : 0, readers: [] };
  }

  // sentStatus says what the sender sees under a confirmed message: ticks in a DM; in a group, a
  // read tick under every own message someone has read and "Read by N" under the newest.
  function sentStatus(c, m, isLast) {
    if (c.kind === 'dm') {
      const read = m.seq <= c.peerReadSeq;
      const delivered = read || m.seq <= c.peerDeliveredSeq;
      if (read) return { sig: 'read', tick: 'read', read, delivered, text: '✓✓', label: 'Read' };
      if (delivered) return { sig: 'delivered', tick: 'delivered', read, delivered, text: '✓✓', label: 'Delivered' };
      return { sig: 'sent', tick: 'sent', read, delivered, text: '✓', label: 'Sent' };
    }
    const { n, readers } = groupReadBy(c, m.seq);
    if (n > 0) {
      return { sig: `by${n}${isLast ? 'last' : ''}`, tick: 'read', readBy: n, text: isLast ? `Read by ${n}` : '✓✓', label: `Read by ${n}`, title: readers.map(nameOf).join(', ') };
    }
    return { sig: 'sent', tick: 'sent', text: '✓', label: 'Sent' };
  }

  // dayKey names a local calendar day; dayLabel says it the way chat apps do.
  function dayKey(d) {
    return `${d.getFullYear()}-${String(d.getMonth() + 1).padStart(2, '0')}-${String(d.getDate()).padStart(2, '0')}`;
  }

  function dayLabel(d) {
    const midnight = (x) => new Date(x.getFullYear(), x.getMonth(), x.getDate()).getTime();
    const days = Math.round((midnight(new Date()) - midnight(d)) / 86400000);
    if (days === 0) return 'Today';
    if (days === 1) return 'Yesterday';
    if (days > 1 && days < 7) return d.toLocaleDateString([], { weekday: 'long' });
    const sameYear = d.getFullYear() === new Date().getFullYear();
    return d.toLocaleDateString([], { weekday: 'short', day: 'numeric', month: 'long', year: sameYear ? undefined : 'numeric' });
  }

  // dateItem is a day's separator: a list item with no seq and no state, so not a message. It
  // stays a list item (a list holds only those), which reads its day.
  function dateItem(key, label) {
    return h('li', { class: 'day', 'data-day': key }, h('span', {}, label));
  }

  function dividerItem() {
    return h('li', { class: 'divider' }, h('span', {}, 'New messages'));
  }

  // bodyOf is a message's text, laid out in the direction of its own script (dir="auto": Hebrew
  // and Arabic run right to left). A long body is collapsed behind "Show more", and only its
  // preview is laid out until then: a 16 KB body costs layout on every change of the pane.
  function bodyOf(m, convId = m.conversationId) {
    if (m.kind === 'deleted') return h('p', { class: 'body deleted' }, 'This message was deleted.');
    const text = m.body || '';
    const preview = previewOf(text);
    if (preview === null) return h('p', { class: 'body', dir: 'auto' }, linkify(text));
    const key = `${convId}:${m.seq}`;
    // The toggle's listener holds this text: an edit brings a new body and toggle, not a morph.
    const mark = `${text.length}:${hashText(text)}`;
    const body = h('p', { class: 'body', dir: 'auto', id: `body-${m.seq}`, 'data-replace': mark });
    const toggle = h('button', { type: 'button', class: 'show-more link', 'aria-controls': body.id, 'data-replace': mark });
    const show = (expanded) => {
      body.replaceChildren(linkify(expanded ? text : preview));
      toggle.textContent = expanded ? 'Show less' : 'Show more';
      toggle.setAttribute('aria-expanded', String(expanded));
    };
    toggle.addEventListener('click', () => {
      const expanded = !state.expanded.has(key);
      if (expanded) state.expanded.add(key); else state.expanded.delete(key);
      show(expanded); // in place, so focus stays on the toggle
    });
    show(state.expanded.has(key));
    const frag = document.createDocumentFragment();
    frag.append(body, toggle);
    return frag;
  }

  // hashText is a 32-bit FNV-1a hash of a text, to tell two texts apart without keeping either.
  function hashText(text) {
    let x = 0x811c9dc5;
    for (let i = 0; i < text.length; i++) x = Math.imul(x ^ text.charCodeAt(i), 0x01000193);
    return (x >>> 0).toString(36);
  }

  // linkify turns the http and https addresses in a text into links, built as DOM nodes (never
  // HTML): the rest stays text, and no other scheme (javascript:, data:) ever becomes a link.
  // Links open in a new tab without telling it where they came from (noopener noreferrer).
  const URL_PATTERN = /\bhttps?:\/\/[^\s<>"\u2026]+/gi;
  function linkify(text) {
    const frag = document.createDocumentFragment();
    let last = 0;
    for (const match of text.matchAll(URL_PATTERN)) {
      const raw = trimUrlEnd(match[0]);
      const href = safeHref(raw);
      if (!href) continue;
      frag.append(text.slice(last, match.index),
        h('a', { href, target: '_blank', rel: 'noopener noreferrer' }, raw));
      last = match.index + raw.length;
    }
    frag.append(text.slice(last));
    return frag;
  }

  // trimUrlEnd leaves the punctuation that ends a sentence out of an address ("see https://x.org.")
  // and a closing bracket that has no opening one inside it ("(https://x.org)").
  function trimUrlEnd(raw) {
    let url = raw;
    for (;;) {
      const last = url.slice(-1);
      if ('.,;:!?\'"'.includes(last)) { url = url.slice(0, -1); continue; }
      const open = { ')': '(', ']': '[', '}': '{' }[last];
      if (open && url.split(open).length < url.split(last).length) { url = url.slice(0, -1); continue; }
      return url;
    }
  }

  function safeHref(raw) {
    try {
      const u = new URL(raw);
      return u.protocol === 'http:' || u.protocol === 'https:' ? u.href : null;
    } catch {
      return null;
    }
  }

  // previewOf is the start of a long text, cut at a line end or PREVIEW_CHARS; null for a text
  // short enough to show whole.
  function previewOf(text) {
    let lines = 0;
    let cut = -1;
    for (let i = text.indexOf('\n'); i !== -1; i = text.indexOf('\n', i + 1)) {
      lines++;
      if (lines === PREVIEW_LINES) cut = i;
      if (lines >= LONG_BODY_LINES) break;
    }
    if (text.length <= LONG_BODY_CHARS && lines < LONG_BODY_LINES) return null;
    let end = Math.min(text.length, PREVIEW_CHARS);
    if (cut !== -1 && cut < end) end = cut;
    return `${text.slice(0, end).trimEnd()}…`;
  }

  function messageItem(c, m, status, quote) {
    const mine = m.senderId === me();
    if (m.kind === 'system') {
      return h('li', { class: 'msg system', 'data-seq': m.seq }, h('p', { class: 'body', dir: 'auto' }, systemText(c, m)));
    }
    const attrs = {
      class: `msg ${mine ? 'mine' : 'theirs'}`, 'data-seq': m.seq, 'data-sender': m.senderId,
      'data-state': 'sent', 'data-client-msg-id': m.clientMsgId,
    };
    if (status && status.read !== undefined) attrs['data-read'] = String(status.read);
    if (status && status.delivered !== undefined) attrs['data-delivered'] = String(status.delivered);
    if (status && status.readBy !== undefined) attrs['data-read-by'] = String(status.readBy);
    const who = mine ? 'your message' : `message from ${nameOf(m.senderId)}`;
    // A tombstone has nothing left to answer or delete: no menu.
    const menuButton = m.kind === 'text' ? h('button', {
      type: 'button', class: 'msg-actions', 'aria-haspopup': 'menu', 'aria-expanded': 'false',
      'aria-controls': 'msg-menu', 'aria-label': `Options for ${who}`,
    }, h('span', { 'aria-hidden': 'true' }, '⋯')) : null;
    const bubble = h('div', { class: 'bubble' },
      h('span', { class: mine || c.kind === 'dm' ? 'sr-only' : 'sender' }, mine ? 'You' : nameOf(m.senderId)),
      quote ? quoteItem(quote) : null,
      bodyOf(m, c.id),
      m.kind === 'text' ? reactionChips(m) : null,
      h('span', { class: 'meta' },
        m.editedAt && m.kind === 'text' ? h('span', { class: 'edited', title: `Edited ${formatTime(m.editedAt)}` }, 'edited') : null,
        h('time', { datetime: m.createdAt }, formatTime(m.createdAt)),
        status ? h('span', { class: `tick ${status.tick}`, role: 'img', 'aria-label': status.label, title: status.title || status.label }, status.text) : null));
    // The button sits beside the bubble, on the side facing the middle of the pane.
    return mine ? h('li', attrs, menuButton, bubble) : h('li', attrs, bubble, menuButton);
  }

  // reactionsSig changes whenever what the chips show does.
  const reactionsSig = (m) => (m.reactions || []).map((r) => `${r.emoji}${r.count}${r.me ? '*' : ''}`).join(',');

  // reactionChips are the reactions under a message: "👍 2" per emoji, the ones this user used
  // pressed (aria-pressed) and outlined; a click adds or takes away this user's.
  function reactionChips(m) {
    const list = (m.reactions || []).filter((r) => r.count > 0);
    if (!list.length) return null;
    return h('div', { class: 'reactions', role: 'group', 'aria-label': 'Reactions' },
      ...list.map((r) => h('button', {
        type: 'button', class: `chip${r.me ? ' me' : ''}`, 'data-emoji': r.emoji, 'aria-pressed': String(!!r.me),
        'aria-label': `${r.emoji} ${r.count}${r.me ? ', you reacted; press to take yours away' : '; press to react too'}`,
      }, `${r.emoji} ${r.count}`)));
  }

  function pendingItem(c, p, quote) {
    const failed = p.state === 'failed';
    return h('li', { class: `msg mine ${p.state}`, 'data-state': p.state, 'data-client-msg-id': p.clientMsgId },
      h('div', { class: 'bubble' },
        h('span', { class: 'sr-only' }, 'You'),
        quote ? quoteItem(quote) : null,
        h('p', { class: 'body', dir: 'auto' }, previewOf(p.body) ?? p.body),
        h('span', { class: 'meta' }, failed
          ? h('span', { class: 'fail', role: 'alert' }, p.error || 'Not sent.')
          : h('span', { class: 'tick sending', role: 'img', 'aria-label': p.state === 'queued' ? 'Waiting to send' : 'Sending' }, '…')),
        failed ? h('span', { class: 'actions' },
          p.retryable ? h('button', { type: 'button', class: 'retry', onclick: () => attemptSend(p) }, 'Retry') : null,
          h('button', { type: 'button', class: 'discard link', onclick: () => discardPending(p) }, 'Discard')) : null));
  }

  // ---- Read cursors and receipts ---------------------------------------------------------------

  const reads = { convId: null, seq: 0, timer: null, sent: new Map() };

  // What is on screen: the browser tells an IntersectionObserver which message elements of the open
  // conversation are in the pane (more than the bottom 8 px) at each frame it draws. Only these
  // count as read, so messages scrolled past by the page itself, or laid out below the fold, stay
  // unread until the user has had them in view.
  const onScreen = new Set(); // message elements in view now
  const observed = new Set();
  const screenObserver = new IntersectionObserver((entries) => {
    for (const en of entries) {
      if (en.isIntersecting) onScreen.add(en.target);
      else onScreen.delete(en.target);
    }
    markVisibleRead();
    updateCue();
  }, { root: ui.scroller, rootMargin: '0px 0px -8px 0px' });

  // observeMessages watches the message elements a render added and forgets those it removed.
  function observeMessages() {
    for (const e of observed) {
      if (e.parentNode === ui.list) continue;
      screenObserver.unobserve(e);
      observed.delete(e);
      onScreen.delete(e);
    }
    for (const e of ui.list.children) {
      if (e.dataset.seq && !observed.has(e)) {
        observed.add(e);
        screenObserver.observe(e);
      }
    }
  }

  function newestOnScreen() {
    let seq = 0;
    for (const e of onScreen) if (e.parentNode === ui.list) seq = Math.max(seq, Number(e.dataset.seq));
    return seq;
  }

  // seenSeq is the newest message of c the user has read or has on screen.
  function seenSeq(c) {
    let seq = Math.max(c.readSeq, reads.sent.get(c.id) || 0, reads.convId === c.id ? reads.seq : 0);
    if (c.id === state.openId && document.visibilityState === 'visible') seq = Math.max(seq, newestOnScreen());
    return seq;
  }

  // markVisibleRead moves the read cursor to the newest message the user has on screen, if the
  // page is visible; the frame is sent after READ_DEBOUNCE_MS, or at once when the page is hidden.
  function markVisibleRead() {
    const c = openConv();
    if (!c || document.visibilityState !== 'visible' || ui.convBody.hidden) return;
    const seq = newestOnScreen();
    if (seq <= Math.max(c.readSeq, reads.sent.get(c.id) || 0)) return;
    if (reads.convId && reads.convId !== c.id) flushRead();
    reads.convId = c.id;
    reads.seq = Math.max(reads.seq, seq);
    ui.list.dataset.unsentRead = String(reads.seq); // what the debounce holds back, for tests and tools
    if (!reads.timer) reads.timer = setTimeout(flushRead, READ_DEBOUNCE_MS);
  }

  function flushRead() {
    clearTimeout(reads.timer);
    reads.timer = null;
    if (!reads.convId) return;
    if (sendFrame({ type: 'read', conversationId: reads.convId, seq: reads.seq })) {
      reads.sent.set(reads.convId, reads.seq);
      reads.convId = null;
      ui.list.dataset.sentRead = String(reads.seq);
      reads.seq = 0;
      delete ui.list.dataset.unsentRead;
    } // not connected: kept, and sent again once the user sees the messages after the sync
  }

  // flushReadUnloading sends the pending read cursor as the page goes away, and also keeps it in
  // localStorage: a frame sent during unload can be lost, and the next page load sends it again.
  function flushReadUnloading() {
    if (!state.auth) return;
    const saved = savedReads();
    const keep = (id, seq) => { if (id && seq) saved[id] = Math.max(saved[id] || 0, seq); };
    keep(reads.convId, reads.seq);
    for (const [id, seq] of reads.sent) keep(id, seq);
    localStorage.setItem(READS_KEY + me(), JSON.stringify(saved));
    flushRead();
    // A beacon outlives the page, unlike a frame queued on a socket that is being torn down.
    const url = `/api/read?token=${encodeURIComponent(state.auth.token)}`;
    for (const [conversationId, seq] of Object.entries(saved)) {
      navigator.sendBeacon(url, JSON.stringify({ conversationId, seq }));
    }
  }

  function savedReads() {
    try { return JSON.parse(localStorage.getItem(READS_KEY + me())) || {}; } catch { return {}; }
  }

  // resendSavedReads runs after a sync: a saved cursor ahead of the server's is applied here at once
  // and sent again; the server answers with the badge.
  function resendSavedReads() {
    const saved = savedReads();
    localStorage.removeItem(READS_KEY + me());
    for (const [id, seq] of Object.entries(saved)) {
      const c = state.convs.get(id);
      if (!c || seq <= c.readSeq) continue;
      if (!sendFrame({ type: 'read', conversationId: id, seq })) continue;
      applyOwnRead(c, Math.min(seq, c.lastSeq));
    }
    recountTotal();
  }

  let receiptsTimer = null;
  function refreshReceiptsSoon() {
    clearTimeout(receiptsTimer);
    receiptsTimer = setTimeout(refreshReceipts, 300);
  }

  // refreshReceipts asks who read an own message of the open conversation. In a DM it is the oldest
  // one not known to be read: the peer is listed, with their read position, when they have read it,
  // and that position gives the ticks of every own message, also of those loaded later (after a
  // reload the page knows no receipt pushes). In a group it is the oldest own message shown: its
  // readers' positions give every later own message its count (see groupReadBy).
  async function refreshReceipts() {
    const c = openConv();
    const w = openWindow();
    if (!c || !w || !conn.live) return;
    if (c.kind !== 'dm') { await refreshGroupReads(c, w); return; }
    const seq = oldestUnreadOwnSeq(c, w);
    if (!seq) return;
    try {
      const r = await request({ type: 'receipts', conversationId: c.id, seq });
      for (const rd of r.readers || []) if (rd.userId !== me()) c.peerReadSeq = Math.max(c.peerReadSeq, rd.readSeq);
      if (r.deliveredTo >= 1) c.peerDeliveredSeq = Math.max(c.peerDeliveredSeq, seq);
      // Delivered is a position too: when the newest own message has reached the other member's
      // devices, every older one has, so one more question gives every message's ticks.
      const last = lastOwnSeq(w);
      if (last > Math.max(c.peerReadSeq, c.peerDeliveredSeq)) {
        const r2 = await request({ type: 'receipts', conversationId: c.id, seq: last });
        if (r2.deliveredTo >= 1) c.peerDeliveredSeq = Math.max(c.peerDeliveredSeq, last);
        if (r2.readBy >= 1) c.peerReadSeq = Math.max(c.peerReadSeq, last);
      }
      if (c.id === state.openId) renderMessages();
    } catch { /* receipts are a nicety; the next receipt push asks again */ }
  }

  async function refreshGroupReads(c, w) {
    const from = firstOwnSeq(w);
    if (!from) return;
    try {
      const r = await request({ type: 'receipts', conversationId: c.id, seq: from });
      const g = { from, readers: null, counts: [[from, r.readBy || 0]] };
      if (r.readers || !r.readBy) {
        g.readers = new Map((r.readers || []).filter((rd) => rd.userId !== me()).map((rd) => [rd.userId, rd.readSeq]));
      } else {
        // A large group lists no readers: the newest own message gets its own count.
        const last = lastOwnSeq(w);
        if (last > from) {
          const r2 = await request({ type: 'receipts', conversationId: c.id, seq: last });
          g.counts.push([last, r2.readBy || 0]);
          g.counts.sort((a, b) => a[0] - b[0]);
        }
      }
      c.groupReads = g;
      if (c.id === state.openId) renderMessages();
    } catch { /* receipts are a nicety; the next receipt push asks again */ }
  }

  // ---- Delivered positions ---------------------------------------------------------------------

  // The page tells the server, per conversation, the highest seq it has received (pushes, sync
  // replays, pages), so a sender sees ✓✓ "delivered"; coalesced like the read cursor.
  const delivery = { hi: new Map(), sent: new Map(), timer: null };

  function noteReceived(convId, seq) {
    if (seq <= (delivery.hi.get(convId) || 0)) return;
    delivery.hi.set(convId, seq);
    if (!delivery.timer) delivery.timer = setTimeout(flushDelivered, DELIVERED_DEBOUNCE_MS);
  }

  function flushDelivered() {
    clearTimeout(delivery.timer);
    delivery.timer = null;
    for (const [id, seq] of delivery.hi) {
      if (seq <= (delivery.sent.get(id) || 0)) continue;
      // Not connected: kept, and sent after the next sync.
      if (sendFrame({ type: 'delivered', conversationId: id, seq })) delivery.sent.set(id, seq);
    }
  }

  // onPeerDelivered: the other member of a DM has received up to deliveredSeq: ✓✓ on own messages.
  function onPeerDelivered(f) {
    const c = state.convs.get(f.conversationId);
    if (!c || c.kind !== 'dm' || f.userId === me()) return;
    if ((f.deliveredSeq || 0) <= c.peerDeliveredSeq) return;
    c.peerDeliveredSeq = f.deliveredSeq;
    if (c.id === state.openId) renderMessages();
  }

  // ---- Sending ---------------------------------------------------------------------------------

  function restorePending() {
    state.pending.clear();
    let saved = [];
    try { saved = JSON.parse(localStorage.getItem(PENDING_KEY + me())) || []; } catch { saved = []; }
    for (const p of saved) {
      // Sent before the page was reloaded: maybe stored, maybe not. Retry reuses the id, so it is
      // stored once either way.
      state.pending.set(p.clientMsgId, { ...p, state: 'failed', retryable: true, error: 'Not confirmed.' });
    }
  }

  function savePending() {
    if (!state.auth) return;
    const list = [...state.pending.values()].map(({ clientMsgId, convId, body, createdAt, replyTo }) => ({ clientMsgId, convId, body, createdAt, replyTo }));
    if (list.length) localStorage.setItem(PENDING_KEY + me(), JSON.stringify(list));
    else localStorage.removeItem(PENDING_KEY + me());
  }

  function submitMessage(ev) {
    ev.preventDefault();
    if (state.editing && state.editing.convId === state.openId) { saveEdit(); return; }
    const c = openConv();
    const body = ui.input.value;
    if (!c || !body.trim() || !checkDraft()) return; // too long: the warning says so, the text stays
    ui.input.value = '';
    autosize();
    checkDraft();
    const p = { clientMsgId: uuid(), convId: c.id, body, createdAt: new Date().toISOString(), state: 'sending' };
    const replyTo = state.replyTo.get(c.id);
    if (replyTo) p.replyTo = replyTo; // the pending message keeps it: a failed send is retried as the same reply
    state.replyTo.delete(c.id);
    renderReplyBar();
    state.pending.set(p.clientMsgId, p);
    savePending();
    const w = openWindow();
    if (w && w.hasAfter) replaceWindow(c.id, {}, { bottom: true }); // show the newest, where the message goes
    else renderMessages({ bottom: true });
    if (outbox.draining) p.state = 'queued'; // behind the resends, to keep the order it was written in
    else attemptSend(p);
    drainOutbox();
  }

  // checkDraft counts the draft the way the server does (UTF-8 bytes, protocol.MaxBodyBytes) and,
  // when it is over, says so and disables Send; the text is kept for the user to shorten. It
  // reports whether the draft fits.
  function checkDraft() {
    const bytes = new TextEncoder().encode(ui.input.value).length;
    const over = bytes > MAX_BODY_BYTES;
    const text = over ? `Too long to send: ${bytes.toLocaleString('en-US')} bytes, at most ${MAX_BODY_BYTES.toLocaleString('en-US')}. Shorten it by ${(bytes - MAX_BODY_BYTES).toLocaleString('en-US')} to send.` : '';
    if (ui.warning.textContent !== text) ui.warning.textContent = text;
    ui.warning.hidden = !over;
    ui.send.disabled = over;
    if (over) ui.input.setAttribute('aria-invalid', 'true');
    else ui.input.removeAttribute('aria-invalid');
    return !over;
  }

  // The outbox resends, after every reconnect, the messages whose send failed in a way a retry
  // can mend (offline, connection lost, timeout, unavailable), one at a time in the order they were
  // written, each with its own clientMsgId, so the server stores each once and in that order.
  const outbox = { draining: false };

  function resendFailed() {
    let any = false;
    for (const p of state.pending.values()) {
      if (p.state === 'failed' && p.retryable) { p.state = 'queued'; p.tries = 0; any = true; }
    }
    if (!any) return;
    if (state.openId) renderMessages();
    drainOutbox();
  }

  async function drainOutbox() {
    if (outbox.draining) return;
    outbox.draining = true;
    try {
      for (;;) {
        const p = [...state.pending.values()].find((x) => x.state === 'queued');
        if (!p) break;
        const err = await attemptSend(p);
        if (!err || !state.pending.has(p.clientMsgId)) continue;
        p.tries = (p.tries || 0) + 1;
        if (err.code === 'rate_limited' && conn.live && p.tries < RESEND_MAX_TRIES) {
          p.state = 'queued';
          await new Promise((r) => { setTimeout(r, Math.max(err.retryAfterMs, 50)); });
          continue;
        }
        // The rest waits for the next reconnect (or a Retry), still behind this one.
        for (const q of state.pending.values()) {
          if (q.state === 'queued') { q.state = 'failed'; q.retryable = true; q.error = 'Not sent yet.'; }
        }
        if (state.openId) renderMessages();
        break;
      }
    } finally {
      outbox.draining = false;
    }
  }

  // attemptSend sends one pending message and resolves with null once it is stored, or with the
  // error that left it failed.
  async function attemptSend(p) {
    p.state = 'sending';
    p.error = '';
    if (p.convId === state.openId) renderMessages({ bottom: true });
    try {
      const frame = { type: 'send', conversationId: p.convId, clientMsgId: p.clientMsgId, body: p.body };
      if (p.replyTo) frame.replyTo = p.replyTo;
      const ack = await request(frame, SEND_TIMEOUT_MS);
      confirmSend(p.clientMsgId, ackedMessage(ack, p));
      return null;
    } catch (err) {
      if (!state.pending.has(p.clientMsgId)) return null; // confirmed meanwhile by a replay or a late ack
      p.state = 'failed';
      p.retryable = err.retryable || ['offline', 'disconnected', 'timeout'].includes(err.code);
      // "disconnected" and "timeout" mean the frame went out: it may be stored, and Retry (same
      // clientMsgId) cannot store it twice.
      p.error = err.code === 'offline' ? 'Not sent: offline. It is sent when the connection is back.'
        : err.code === 'disconnected' ? 'Not confirmed: the connection was lost. It is sent again when it is back.'
          : err.code === 'timeout' ? 'Not confirmed in time.' : `Not sent: ${err.message || err.code}.`;
      if (p.convId === state.openId) renderMessages();
      return err;
    }
  }

  function ackedMessage(ack, p = state.pending.get(ack.clientMsgId)) {
    if (!p) return null;
    return {
      conversationId: ack.conversationId || p.convId, seq: ack.seq, senderId: me(), kind: 'text',
      body: p.body, createdAt: ack.createdAt || p.createdAt, clientMsgId: p.clientMsgId, replyTo: p.replyTo,
    };
  }

  // confirmSend turns a pending message into the stored one: by its ack, or by the push or page
  // that carries its clientMsgId, whichever comes first.
  function confirmSend(clientMsgId, m) {
    if (!m || !state.pending.has(clientMsgId)) return;
    state.pending.delete(clientMsgId);
    savePending();
    onMessage(m);
    const c = state.convs.get(m.conversationId);
    if (c && c.kind === 'group' && c.id === state.openId) refreshReceiptsSoon();
  }

  function confirmFromHistory(m) {
    if (m.senderId === me() && m.clientMsgId && state.pending.has(m.clientMsgId)) {
      state.pending.delete(m.clientMsgId);
      savePending();
    }
  }

  function discardPending(p) {
    state.pending.delete(p.clientMsgId);
    savePending();
    renderMessages();
  }

  function onMessage(m) {
    if (!m || !m.conversationId || !(m.seq > 0)) return;
    const c = state.convs.get(m.conversationId);
    if (m.senderId !== me()) noteReceived(m.conversationId, m.seq);
    if (c && m.kind === 'deleted') c.deletedSeqs.add(m.seq);
    notePreview(c, m);
    const isNew = c && m.seq > c.lastSeq;
    const wasHidden = !!(c && c.hidden);
    if (isNew && c) c.hidden = false;
    // No badge frame comes with a message: unread is derived here, as the server does it (own
    // messages are read).
    if (isNew) {
      const prevLastSeq = c.lastSeq;
      c.lastSeq = m.seq;
      if (m.senderId === me()) {
        c.readSeq = Math.max(c.readSeq, m.seq);
        c.unread = 0;
        pruneGone(c);
      } else {
        if (m.kind === 'deleted') c.gone.add(m.seq);
        const from = Math.max(prevLastSeq, c.readSeq); // seqs it moves lastSeq over, less tombstones
        c.unread += Math.max(0, m.seq - from) - goneIn(c, from, m.seq);
      }
      recountTotal();
    } else {
      rememberGone(c, m); // a replay or duplicate: the count already stands
    }
    if (m.senderId === me() && m.clientMsgId && state.pending.has(m.clientMsgId)) {
      confirmSend(m.clientMsgId, m);
      renderConvList();
      return;
    }
    // A conversation this page does not know (deleted for me, then written to again), or a
    // membership change: the list tells the rest.
    if (!c || m.kind === 'system') refreshListSoon();
    if (c) {
      c.lastSeq = Math.max(c.lastSeq, m.seq);
      c.activity = Math.max(c.activity, Date.parse(m.createdAt) || Date.now());
      c.typing.delete(m.senderId);
    }
    deliver(m);
    if (m.conversationId === state.openId) {
      renderMessages();
      renderTyping();
    }
    if (isNew && m.senderId !== me() && !wasHidden) notifyDesktop(c, m);
    if (isNew && m.senderId !== me()) {
      announce(m.conversationId === state.openId ? `${nameOf(m.senderId)}: ${m.body || 'message deleted'}`
        : `New message from ${nameOf(m.senderId)}`);
    }
    renderConvList();
  }

  // ---- Composer and typing ---------------------------------------------------------------------

  const typingSent = new Map(); // conversation id -> when a typing frame was last sent
  function onInput() {
    autosize();
    checkDraft();
    const c = openConv();
    if (!c || !ui.input.value.trim()) return;
    // Editing an old message is not writing a new one: the others are not told "typing".
    if (state.editing && state.editing.convId === c.id) return;
    const last = typingSent.get(c.id) || 0;
    if (Date.now() - last < TYPING_SEND_EVERY_MS) return;
    if (sendFrame({ type: 'typing', conversationId: c.id })) typingSent.set(c.id, Date.now());
  }

  function autosize() {
    ui.input.style.height = 'auto';
    ui.input.style.height = `${Math.min(ui.input.scrollHeight, 160)}px`;
  }

  // ---- Notices and confirmations ---------------------------------------------------------------

  // showNotice says, under the top bar, why something the user asked for did not happen. It stays
  // until dismissed or replaced: a refusal that vanished by itself could go unread.
  function showNotice(text) {
    ui.noticeText.textContent = text;
    ui.notice.hidden = false;
  }

  function hideNotice() {
    ui.notice.hidden = true;
    ui.noticeText.textContent = '';
  }

  // failureText is "<what could not be done>: <why>." for a refused request, in the server's words.
  function failureText(what, err) {
    const why = errorText(err).replace(/\.$/, '');
    return `${what}: ${why.charAt(0).toLowerCase()}${why.slice(1)}.`;
  }

  // confirmAction asks before something that cannot be undone; it resolves true for the confirm
  // button, false for Cancel, Escape or a click beside the dialog.
  function confirmAction({ title, text, ok }) {
    ui.confirmTitle.textContent = title;
    ui.confirmText.textContent = text;
    ui.confirmOk.textContent = ok;
    const opener = document.activeElement;
    return new Promise((resolve) => {
      const done = (yes) => {
        ui.confirmOk.onclick = null;
        ui.confirmCancel.onclick = null;
        ui.confirm.onclose = null;
        if (ui.confirm.open) ui.confirm.close();
        if (opener && opener.isConnected) opener.focus();
        resolve(yes);
      };
      ui.confirmOk.onclick = () => done(true);
      ui.confirmCancel.onclick = () => done(false);
      ui.confirm.onclose = () => done(false); // Escape
      ui.confirm.showModal();
      ui.confirmCancel.focus(); // the safe choice has the focus
    });
  }

  // ---- Menus -----------------------------------------------------------------------------------

  // One menu is open at a time. It takes the focus, arrows move through its items, Escape (or Tab,
  // or a click elsewhere) closes it, and the focus goes back to the button that opened it.
  const openMenu = { el: null, trigger: null };

  function showMenu(el, trigger) {
    closeMenus();
    openMenu.el = el;
    openMenu.trigger = trigger;
    el.hidden = false;
    if (trigger) trigger.setAttribute('aria-expanded', 'true');
    menuItems(el)[0]?.focus();
  }

  function closeMenus({ restoreFocus = false } = {}) {
    const { el, trigger } = openMenu;
    if (!el) return;
    el.hidden = true;
    openMenu.el = null;
    openMenu.trigger = null;
    if (trigger) trigger.setAttribute('aria-expanded', 'false');
    if (restoreFocus && trigger && trigger.isConnected) trigger.focus();
  }

  const menuItems = (el) => [...el.querySelectorAll('[role="menuitem"]')].filter((b) => !b.hidden);

  function onMenuKey(e) {
    const items = menuItems(e.currentTarget);
    const i = items.indexOf(document.activeElement);
    if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
      e.preventDefault();
      const next = (i + (e.key === 'ArrowDown' ? 1 : -1) + items.length) % items.length;
      items[next].focus();
    } else if (e.key === 'Home' || e.key === 'End') {
      e.preventDefault();
      items[e.key === 'Home' ? 0 : items.length - 1].focus();
    } else if (e.key === 'Escape') {
      e.preventDefault();
      closeMenus({ restoreFocus: true });
    } else if (e.key === 'Tab') {
      closeMenus({ restoreFocus: true });
      e.preventDefault();
    }
  }

  // ---- Message menu: reply, delete for everyone ------------------------------------------------

  const msgMenuFor = { convId: null, seq: 0, scrollTop: 0 };

  // openMessageMenu opens the menu of the message li next to the box at (its button, or the
  // point a finger held). The menu floats over the pane, kept inside the window.
  function openMessageMenu(li, at) {
    const c = openConv();
    const w = openWindow();
    const m = c && w && w.bySeq.get(Number(li.dataset.seq));
    if (!m || m.kind !== 'text') return;
    msgMenuFor.convId = c.id;
    msgMenuFor.seq = m.seq;
    msgMenuFor.scrollTop = ui.scroller.scrollTop;
    ui.msgDelete.hidden = m.senderId !== me(); // only the sender may delete for everyone
    ui.msgEdit.hidden = m.senderId !== me(); // or edit
    showMenu(ui.msgMenu, li.querySelector('.msg-actions'));
    const r = at;
    const mr = ui.msgMenu.getBoundingClientRect();
    const left = li.classList.contains('mine') ? r.right - mr.width : r.left;
    const below = r.bottom + 4 + mr.height <= window.innerHeight;
    ui.msgMenu.style.left = `${Math.max(8, Math.min(left, window.innerWidth - mr.width - 8))}px`;
    ui.msgMenu.style.top = `${below ? r.bottom + 4 : Math.max(8, r.top - mr.height - 4)}px`;
  }

  // Long-press: a touch held still on a bubble for LONG_PRESS_MS opens its menu. The click and the
  // platform's context menu that follow the release are swallowed.
  const press = { timer: null, x: 0, y: 0, fired: false };

  function onListPointerDown(e) {
    press.fired = false; // a new gesture: a long-press that got no click after it is over
    if (e.pointerType !== 'touch') return;
    const li = e.target.closest('#messages > li[data-seq]');
    if (!li || !li.querySelector('.msg-actions') || e.target.closest('a, button')) return;
    cancelPress();
    press.x = e.clientX;
    press.y = e.clientY;
    const seq = li.dataset.seq;
    press.timer = setTimeout(() => {
      press.timer = null;
      press.fired = true;
      // The item may have been redrawn meanwhile (a tick changed): find it again by its seq.
      const now = ui.list.querySelector(`li[data-seq="${seq}"]`);
      const point = { left: press.x, right: press.x, top: press.y, bottom: press.y };
      if (now) openMessageMenu(now, point);
    }, LONG_PRESS_MS);
  }

  function onListPointerMove(e) {
    if (press.timer && Math.hypot(e.clientX - press.x, e.clientY - press.y) > LONG_PRESS_SLOP_PX) cancelPress();
  }

  function cancelPress() {
    clearTimeout(press.timer);
    press.timer = null;
  }

  function onListClick(e) {
    if (press.fired) { // the release of a long-press
      press.fired = false;
      e.preventDefault();
      return;
    }
    const button = e.target.closest('.msg-actions');
    if (button) {
      if (openMenu.el === ui.msgMenu && openMenu.trigger === button) closeMenus({ restoreFocus: true });
      else openMessageMenu(button.closest('li'), button.getBoundingClientRect());
      return;
    }
    const chip = e.target.closest('.chip');
    if (chip) {
      const seq = Number(chip.closest('li').dataset.seq);
      react(state.openId, seq, chip.dataset.emoji, chip.getAttribute('aria-pressed') === 'true');
      return;
    }
    const quote = e.target.closest('.quote');
    if (quote) jumpToMessage(Number(quote.dataset.seq));
  }

  // ---- Reactions ------------------------------------------------------------------------------

  function reactFromMenu(e) {
    const pick = e.target.closest('.react-pick');
    if (!pick) return;
    const { convId, seq } = msgMenuFor;
    const w = state.windows.get(convId);
    const m = w && w.bySeq.get(seq);
    const mine = m && (m.reactions || []).some((r) => r.emoji === pick.dataset.emoji && r.me);
    closeMenus({ restoreFocus: true });
    react(convId, seq, pick.dataset.emoji, mine);
  }

  // react adds (or, with remove, takes away) this user's emoji on a message. The chips change when
  // the reaction frame comes back, on every device alike; a refusal (a limit) is told in words.
  async function react(convId, seq, emoji, remove) {
    if (!convId || !seq) return;
    const frame = { type: 'react', conversationId: convId, seq, emoji };
    if (remove) frame.remove = true;
    try {
      await request(frame);
      announce(remove ? `Took away your ${emoji}` : `Reacted ${emoji}`);
    } catch (err) {
      showNotice(failureText(remove ? `Could not take away ${emoji}` : `Could not react with ${emoji}`, err));
    }
  }

  // sendFocus tells the server which conversation this socket shows (or none): large groups push
  // reactions only to sockets that have the conversation in focus.
  let focusSent; // the conversation id last told, '' for none; undefined on a new socket
  function sendFocus() {
    const id = state.openId || '';
    if (!conn.live || focusSent === id) return;
    focusSent = id;
    request(id ? { type: 'focus', conversationId: id } : { type: 'focus' }).catch(() => { focusSent = undefined; });
  }

  // ---- Editing --------------------------------------------------------------------------------

  // startEdit puts an own message's text in the composer; Enter saves it, Escape gives the
  // composer back the draft it held.
  function startEdit() {
    const { convId, seq } = msgMenuFor;
    closeMenus();
    const w = state.windows.get(convId);
    const m = w && w.bySeq.get(seq);
    if (convId !== state.openId || !m || m.kind !== 'text' || m.senderId !== me()) return;
    const draft = state.editing ? state.editing.draft : ui.input.value;
    state.editing = { convId, seq, draft };
    ui.input.value = m.body || '';
    renderEditBar();
    ui.input.focus();
    ui.input.setSelectionRange(ui.input.value.length, ui.input.value.length);
  }

  function cancelEdit({ focus = true } = {}) {
    if (!state.editing) return;
    ui.input.value = state.editing.draft;
    state.editing = null;
    renderEditBar();
    if (focus) ui.input.focus();
  }

  function renderEditBar() {
    const editing = !!state.editing && state.editing.convId === state.openId;
    ui.editBar.hidden = !editing;
    ui.editBar.dataset.seq = editing ? String(state.editing.seq) : '';
    ui.send.textContent = editing ? 'Save' : 'Send';
    autosize();
    checkDraft();
  }

  // saveEdit sends the composer's text as the new text of the message being edited. The page
  // shows it at once; the edited frame that follows brings its version and time. A refusal (the
  // message was deleted meanwhile, a limit) is told in the server's words, and the text stays.
  async function saveEdit() {
    const { convId, seq } = state.editing;
    const body = ui.input.value;
    const w = state.windows.get(convId);
    const m = w && w.bySeq.get(seq);
    if (m && m.body === body) { cancelEdit(); return; }
    if (!body.trim() || !checkDraft()) return;
    ui.send.disabled = true;
    try {
      await request({ type: 'edit_message', conversationId: convId, seq, body });
    } catch (err) {
      showNotice(failureText('Could not edit the message', err));
      return;
    } finally {
      ui.send.disabled = false;
      checkDraft();
    }
    if (state.editing && state.editing.convId === convId && state.editing.seq === seq) cancelEdit();
    applyChange(convId, seq, 0, (x) => { x.body = body; x.editedAt = x.editedAt || new Date().toISOString(); }, true);
    announce('Message edited');
  }

  function startReply() {
    const { convId, seq } = msgMenuFor;
    closeMenus();
    if (convId !== state.openId) return;
    state.replyTo.set(convId, seq);
    renderReplyBar();
    ui.input.focus();
  }

  function cancelReply() {
    state.replyTo.delete(state.openId);
    renderReplyBar();
    ui.input.focus();
  }

  // renderReplyBar shows over the composer what the next send answers, with a button to cancel.
  function renderReplyBar() {
    const seq = state.openId && state.replyTo.get(state.openId);
    const w = openWindow();
    ui.replyBar.hidden = !seq;
    if (!seq) return;
    const q = quoteOf(w, seq);
    ui.replySender.textContent = q.sender || '';
    ui.replyText.textContent = q.text;
    ui.replyBar.dataset.seq = String(seq);
  }

  // quoteOf is what a reply shows of the message it answers, from the messages the page holds:
  // its sender and the start of its text; "a message" when it is not loaded, "deleted message"
  // for a tombstone. sig changes whenever what it shows does.
  // The server's quote (serverQuote, on the reply itself) is used when there is one: it needs
  // nothing loaded; a deletion this page has seen since still shows it as deleted.
  function quoteOf(w, seq, serverQuote) {
    const m = w && w.bySeq.get(seq);
    const c = state.convs.get(state.openId);
    let q;
    if (serverQuote && (serverQuote.deleted || (c && c.deletedSeqs.has(seq)) || (m && m.kind === 'deleted'))) {
      q = { seq, sender: '', text: 'deleted message', state: 'deleted' };
    } else if (serverQuote) {
      const text = (serverQuote.body || '').replace(/\s+/g, ' ').trim();
      q = { seq, sender: serverQuote.senderId === me() ? 'You' : nameOf(serverQuote.senderId), state: 'loaded',
        text: text.length > QUOTE_CHARS ? `${text.slice(0, QUOTE_CHARS).trimEnd()}…` : text };
    } else if (!m) q = { seq, sender: '', text: 'a message', state: 'missing' };
    else if (m.kind === 'deleted') q = { seq, sender: '', text: 'deleted message', state: 'deleted' };
    else {
      const text = (m.body || '').replace(/\s+/g, ' ').trim();
      q = { seq, sender: m.senderId === me() ? 'You' : nameOf(m.senderId), state: 'loaded',
        text: text.length > QUOTE_CHARS ? `${text.slice(0, QUOTE_CHARS).trimEnd()}…` : text };
    }
    q.sig = `${q.state}:${q.sender}:${q.text}`;
    return q;
  }

  function quoteItem(q) {
    const label = q.state === 'loaded' ? `Reply to ${q.sender}: ${q.text}. Show the message` : `Reply to ${q.text}. Show the message`;
    return h('button', { type: 'button', class: `quote ${q.state}`, 'data-seq': q.seq, 'aria-label': label },
      q.sender ? h('span', { class: 'quote-sender' }, q.sender) : null,
      h('span', { class: 'quote-text', dir: 'auto' }, q.text));
  }

  // jumpToMessage brings a replied-to message into view and gives it the focus; one outside the
  // loaded window is loaded around it first.
  function jumpToMessage(seq) {
    const e = ui.list.querySelector(`li[data-seq="${seq}"]`);
    if (!e) { jumpTo(seq); return; }
    const sc = ui.scroller;
    sc.scrollTop += e.getBoundingClientRect().top - sc.getBoundingClientRect().top - sc.clientHeight / 3;
    e.tabIndex = -1;
    e.focus({ preventScroll: true });
    flash(e);
  }

  async function deleteForEveryone() {
    const { convId, seq } = msgMenuFor;
    closeMenus();
    const ok = await confirmAction({
      title: 'Delete for everyone?',
      text: 'The message is removed for every member of the conversation. This cannot be undone.',
      ok: 'Delete',
    });
    if (!ok) return;
    try {
      await request({ type: 'delete_message', conversationId: convId, seq });
      onDeleted({ conversationId: convId, seq }); // the deleted frame follows; applying it twice is harmless
      announce('Message deleted');
    } catch (err) {
      showNotice(failureText('Could not delete the message', err));
    }
  }

  // ---- Conversation menu -----------------------------------------------------------------------

  const dmPeer = (c) => (c && c.kind === 'dm' ? c.members.find((m) => m !== me()) || '' : '');

  function openConvMenu() {
    const c = openConv();
    if (!c) return;
    if (openMenu.el === ui.convMenu) { closeMenus({ restoreFocus: true }); return; }
    const peer = dmPeer(c);
    ui.menuGroupInfo.hidden = c.kind !== 'group';
    ui.menuLeave.hidden = c.kind !== 'group';
    ui.menuBlock.hidden = !peer;
    ui.menuBlock.textContent = state.blocks.has(peer) ? `Unblock ${nameOf(peer)}` : `Block ${nameOf(peer)}`;
    ui.menuMute.textContent = isMuted(c.id) ? 'Unmute notifications' : 'Mute notifications';
    showMenu(ui.convMenu, ui.convMenuButton);
  }

  async function hideConversation() {
    const c = openConv();
    closeMenus();
    if (!c) return;
    const ok = await confirmAction({
      title: 'Delete this conversation for you?',
      text: `${convTitle(c)} leaves your list and its history is cleared for you; the others keep theirs. A new message brings it back.`,
      ok: 'Delete for me',
    });
    if (!ok) return;
    try {
      await request({ type: 'hide_conversation', conversationId: c.id });
      onHidden({ conversationId: c.id, seq: c.lastSeq }); // the hidden frame says the same
    } catch (err) {
      showNotice(failureText('Could not delete the conversation', err));
    }
  }

  async function leaveGroup() {
    const c = openConv();
    closeMenus();
    if (!c || c.kind !== 'group') return;
    const ok = await confirmAction({
      title: `Leave ${convTitle(c)}?`,
      text: 'You stop getting its messages. Someone in the group can add you again.',
      ok: 'Leave group',
    });
    if (!ok) return;
    try {
      await request({ type: 'leave', conversationId: c.id });
      removeConv(c.id); // the removed frame says the same
      announce(`You left ${convTitle(c)}`);
    } catch (err) {
      showNotice(failureText('Could not leave the group', err));
    }
  }

  async function toggleBlockFromMenu() {
    const peer = dmPeer(openConv());
    closeMenus();
    if (!peer) return;
    if (state.blocks.has(peer)) { await setBlocked(peer, false, showNotice); return; }
    const ok = await confirmAction({
      title: `Block ${nameOf(peer)}?`,
      text: 'Neither of you can message the other or add the other to a group until you unblock. They are not told.',
      ok: 'Block',
    });
    if (ok) await setBlocked(peer, true, showNotice);
  }

  // setBlocked blocks or unblocks a user; a refusal is told through report. It resolves true on
  // success.
  async function setBlocked(userId, block, report) {
    try {
      await request({ type: block ? 'block_user' : 'unblock_user', userId });
    } catch (err) {
      report(failureText(block ? `Could not block ${nameOf(userId)}` : `Could not unblock ${nameOf(userId)}`, err));
      return false;
    }
    if (block) state.blocks.add(userId); else state.blocks.delete(userId);
    announce(block ? `${nameOf(userId)} is blocked` : `${nameOf(userId)} is unblocked`);
    renderBlocks();
    if (state.openId) showConversation();
    return true;
  }

  // loadBlocks asks who this user blocks; a block made on another device shows after a reconnect.
  async function loadBlocks() {
    try {
      const r = await request({ type: 'list_blocks' });
      state.blocks = new Set(r.userIds || []);
      renderBlocks();
      if (state.openId) showConversation();
    } catch (err) {
      if (ui.settings.open) ui.settingsError.textContent = failureText('Could not load the blocked users', err);
    }
  }

  // ---- Group info ------------------------------------------------------------------------------

  let groupInfoId = null; // the group the open panel shows

  function openGroupInfo() {
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
  }

  // requestGroupPresence asks who of the open panel's members is online (a group of more than 32
  // gets no presence pushes, so this is how its panel learns); pushes keep small groups current.
  async function requestGroupPresence() {
    const c = state.convs.get(groupInfoId);
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
  // came online); it closes when the user is no longer in the group. Only the group's creator
  // (createdBy) may remove others, so only the creator's panel offers Remove.
  function renderGroupInfo() {
    if (!ui.groupInfo.open) return;
    const c = state.convs.get(groupInfoId);
    if (!c) { ui.groupInfo.close(); return; }
    ui.groupInfoTitle.textContent = convTitle(c);
    ui.groupMembersHeading.textContent = `${c.members.length} member${c.members.length === 1 ? '' : 's'}`;
    const iCreated = !!c.createdBy && c.createdBy === me();
    reconcile(ui.groupMemberList, c.members.map((u) => {
      const presence = u === me() ? '' : presenceText(u);
      const creator = u === c.createdBy;
      const canRemove = iCreated && u !== me();
      const build = () => h('li', { class: 'member', 'data-user': u },
        h('span', { class: 'avatar', 'aria-hidden': 'true', 'data-initial': initial(nameOf(u)) }),
        h('span', { class: 'member-text' },
          h('span', { class: 'member-name', dir: 'auto' }, u === me() ? `${nameOf(u)} (you)` : nameOf(u)),
          creator || presence ? h('span', { class: 'member-presence muted small', 'data-presence': presence },
            [creator ? 'created the group' : '', presence].filter(Boolean).join(' · ')) : null),
        canRemove ? h('button', { type: 'button', class: 'link danger remove-member', 'aria-label': `Remove ${nameOf(u)} from the group`, onclick: () => removeMember(u) }, 'Remove') : null);
      return {
        key: u,
        sig: [u === me(), presence, creator, canRemove, nameOf(u)].join('|'),
        build,
        // In place, like messages: a press on Remove before a presence change and the release
        // after it still make a click.
        update: (e) => morph(e, build()),
      };
    }));
  }

  async function addMembers(ev) {
    ev.preventDefault();
    const c = state.convs.get(groupInfoId);
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
    const c = state.convs.get(groupInfoId);
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

  // ---- Settings --------------------------------------------------------------------------------

  function openSettings() {
    ui.settingsError.textContent = '';
    ui.receiptsSwitch.checked = localStorage.getItem(PRIVACY_KEY + me()) !== 'hidden';
    ui.receiptsStatus.textContent = '';
    ui.presenceSwitch.checked = localStorage.getItem(PRESENCE_KEY + me()) !== 'hidden';
    ui.presenceStatus.textContent = '';
    ui.notifySwitch.checked = notifyOn();
    ui.notifyStatus.textContent = '';
    ui.nameInput.value = state.auth.name || '';
    ui.nameStatus.textContent = '';
    renderBlocks();
    ui.settings.showModal();
    ui.nameInput.focus();
    if (conn.live) loadBlocks();
  }

  async function setReceipts() {
    const send = ui.receiptsSwitch.checked;
    ui.receiptsSwitch.disabled = true;
    ui.receiptsStatus.textContent = 'Saving…';
    try {
      await request({ type: 'set_privacy', hideReceipts: !send });
      localStorage.setItem(PRIVACY_KEY + me(), send ? 'shown' : 'hidden');
      ui.receiptsStatus.textContent = send ? 'Others see when you have read their messages.' : 'Your read receipts are hidden.';
    } catch (err) {
      ui.receiptsSwitch.checked = !send; // the server kept the old setting
      ui.receiptsStatus.textContent = '';
      ui.settingsError.textContent = failureText('Could not change read receipts', err);
    } finally {
      ui.receiptsSwitch.disabled = false;
    }
  }

  async function setPresenceShown() {
    const show = ui.presenceSwitch.checked;
    ui.presenceSwitch.disabled = true;
    ui.presenceStatus.textContent = 'Saving…';
    try {
      await request({ type: 'set_privacy', hidePresence: !show });
      localStorage.setItem(PRESENCE_KEY + me(), show ? 'shown' : 'hidden');
      ui.presenceStatus.textContent = show ? 'Others see when you are online.' : 'Whether you are online is hidden.';
    } catch (err) {
      ui.presenceSwitch.checked = !show; // the server kept the old setting
      ui.presenceStatus.textContent = '';
      ui.settingsError.textContent = failureText('Could not change who sees you online', err);
    } finally {
      ui.presenceSwitch.disabled = false;
    }
  }

  // ---- Desktop notifications ------------------------------------------------------------------

  // "Notify me" (settings) asks the browser's permission from the switch's own click, the user
  // gesture browsers want. While it is on and the tab is hidden, a message of someone else brings
  // a desktop notification, one per conversation (a newer one replaces it); a click on it focuses
  // the tab with that conversation open. Muted conversations, and one that comes back after
  // "Delete for me", never notify; system messages and deletions neither.
  const notifications = new Map(); // conversation id -> the notification it shows

  const notifySupported = () => typeof window.Notification === 'function';
  const notifyOn = () => notifySupported() && Notification.permission === 'granted' && localStorage.getItem(NOTIFY_KEY + me()) === 'on';

  async function setNotify() {
    const want = ui.notifySwitch.checked;
    ui.settingsError.textContent = '';
    if (!want) {
      localStorage.removeItem(NOTIFY_KEY + me());
      ui.notifyStatus.textContent = 'You are not notified.';
      return;
    }
    if (!notifySupported()) {
      ui.notifySwitch.checked = false;
      ui.notifyStatus.textContent = 'This browser cannot show notifications.';
      return;
    }
    let permission = Notification.permission;
    if (permission === 'default') {
      ui.notifySwitch.disabled = true;
      ui.notifyStatus.textContent = 'Waiting for the browser\'s permission…';
      try {
        permission = await Notification.requestPermission();
      } catch {
        permission = 'denied';
      } finally {
        ui.notifySwitch.disabled = false;
      }
    }
    if (permission !== 'granted') {
      ui.notifySwitch.checked = false;
      ui.notifyStatus.textContent = 'Notifications are blocked for this page in the browser\'s settings.';
      return;
    }
    localStorage.setItem(NOTIFY_KEY + me(), 'on');
    ui.notifyStatus.textContent = 'You are notified of new messages while this tab is hidden.';
  }

  function mutedSet() {
    try { return new Set(JSON.parse(localStorage.getItem(MUTED_KEY + me())) || []); } catch { return new Set(); }
  }

  const isMuted = (id) => mutedSet().has(id);

  function toggleMute() {
    const c = openConv();
    closeMenus();
    if (!c) return;
    const muted = mutedSet();
    if (muted.has(c.id)) muted.delete(c.id); else muted.add(c.id);
    localStorage.setItem(MUTED_KEY + me(), JSON.stringify([...muted]));
    announce(muted.has(c.id) ? `${convTitle(c)} muted` : `${convTitle(c)} unmuted`);
    renderConvList();
  }

  function notifyDesktop(c, m) {
    if (!c || m.kind !== 'text' || document.visibilityState !== 'hidden' || !notifyOn() || isMuted(c.id)) return;
    const title = c.kind === 'group' ? `${nameOf(m.senderId)} in ${convTitle(c)}` : nameOf(m.senderId);
    const text = (m.body || '').replace(/\s+/g, ' ').trim();
    let n;
    try {
      n = new Notification(title, {
        body: text.length > NOTIFY_BODY_CHARS ? `${text.slice(0, NOTIFY_BODY_CHARS)}…` : text,
        tag: c.id, // a newer message of the conversation replaces its notification
      });
    } catch {
      return; // a platform that allows only service-worker notifications
    }
    notifications.set(c.id, n);
    n.onclick = () => {
      window.focus();
      n.close();
      if (state.convs.has(c.id)) openConversation(c.id, { focus: true });
    };
    n.onclose = () => { if (notifications.get(c.id) === n) notifications.delete(c.id); };
  }

  // closeNotification takes away the notification of a conversation the user has opened.
  function closeNotification(id) {
    const n = notifications.get(id);
    if (!n) return;
    notifications.delete(id);
    n.close();
  }

  // ---- Presence -------------------------------------------------------------------------------

  // Presence is pushed for DM peers (and small groups) when it changes; the page asks for the open
  // DM's peer when it opens it and after every reconnect, since pushes missed while away are gone.
  function requestPresence() {
    const peer = dmPeer(openConv());
    if (!peer || !conn.live) return;
    request({ type: 'presence', userIds: [peer] }).then((r) => {
      applyPresenceList([peer], r);
      if (dmPeer(openConv()) === peer) showConversation();
    }).catch(() => { /* a nicety; the next push or reconnect tells */ });
  }

  // applyPresenceList keeps the answer to a presence request for the users asked about.
  function applyPresenceList(asked, r) {
    const answered = new Set();
    for (const p of r.presence || []) { state.presence.set(p.userId, p); answered.add(p.userId); }
    // Left out: they hide their presence, or share no conversation any more.
    for (const u of asked) if (!answered.has(u)) state.presence.delete(u);
  }

  function onPresence(f) {
    if (!f.userId) return;
    if (f.online || f.lastSeen) state.presence.set(f.userId, f);
    else state.presence.delete(f.userId); // offline with no time: they now hide it
    if (dmPeer(openConv()) === f.userId) showConversation();
    renderGroupInfo();
  }

  // presenceText is "online", "last seen <time>", or nothing when it is not known or hidden.
  function presenceText(userId) {
    const p = state.presence.get(userId);
    if (!p) return '';
    if (p.online) return 'online';
    return p.lastSeen ? `last seen ${formatTime(p.lastSeen)}` : '';
  }

  function renderBlocks() {
    const ids = [...state.blocks].sort();
    ui.blockedEmpty.hidden = ids.length > 0;
    reconcile(ui.blockedList, ids.map((u) => ({
      key: u,
      sig: nameOf(u),
      build: () => h('li', { class: 'member', 'data-user': u },
        h('span', { class: 'member-name', dir: 'auto' }, nameOf(u)),
        h('button', { type: 'button', class: 'link unblock', 'aria-label': `Unblock ${nameOf(u)}`, onclick: () => unblockFromSettings(u) }, 'Unblock')),
    })));
  }

  async function unblockFromSettings(userId) {
    ui.settingsError.textContent = '';
    if (await setBlocked(userId, false, (t) => { ui.settingsError.textContent = t; })) ui.blockUser.focus();
  }

  async function blockFromSettings(ev) {
    ev.preventDefault();
    if (!ui.blockUser.value.trim()) return;
    const userId = blockFinder.chosen();
    ui.settingsError.textContent = userId ? '' : PICK_SOMEONE;
    if (!userId) return;
    if (await setBlocked(userId, true, (t) => { ui.settingsError.textContent = t; })) { ui.blockUser.value = ''; blockFinder.close(); }
  }

  // signOutHere forgets this device's sign-in; unsent messages would go with it, so it asks first.
  async function signOutHere() {
    const unsent = state.pending.size;
    if (unsent > 0) {
      const ok = await confirmAction({
        title: 'Sign out of this device?',
        text: `${unsent} message${unsent === 1 ? ' is' : 's are'} not sent yet and will be discarded.`,
        ok: 'Sign out',
      });
      if (!ok) return;
    }
    signOut();
  }

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
  ui.editCancel.addEventListener('click', () => cancelEdit());
  ui.msgMenu.addEventListener('click', reactFromMenu);
  ui.presenceSwitch.addEventListener('change', setPresenceShown);
  ui.notifySwitch.addEventListener('change', setNotify);
  ui.menuMute.addEventListener('click', toggleMute);
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
  ui.list.addEventListener('pointerdown', onListPointerDown);
  ui.list.addEventListener('pointermove', onListPointerMove, { passive: true });
  ui.list.addEventListener('pointerup', cancelPress);
  ui.list.addEventListener('pointercancel', cancelPress);
  // The browser's own long-press menu, after ours opened, would cover it.
  ui.list.addEventListener('contextmenu', (e) => { if (press.fired || press.timer) e.preventDefault(); });
  ui.reconnectNow.addEventListener('click', () => { conn.attempt = 0; connect(); });
  ui.dmForm.addEventListener('submit', openDM);
  // Each box that names a person finds people by name. Picking in "Message a user" opens the
  // DM; in a group form it adds a chip; in "Block a user" it fills the box for Block to confirm.
  const dmFinder = personFinder({ input: ui.dmUser, results: ui.dmResults, onPick: (u) => { ui.sidebarError.textContent = ''; openDMWith(u.userId); } });
  const groupPicks = pickedPeople(ui.groupPicked, ui.groupMembers);
  const groupFinder = personFinder({ input: ui.groupMembers, results: ui.groupResults, onPick: (u) => groupPicks.add(u.userId), skip: (u) => groupPicks.has(u) });
  const addPicks = pickedPeople(ui.addPicked, ui.addMembersInput);
  const addFinder = personFinder({
    input: ui.addMembersInput, results: ui.addResults, onPick: (u) => addPicks.add(u.userId),
    skip: (u) => addPicks.has(u) || !!state.convs.get(groupInfoId)?.members.includes(u),
  });
  const blockFinder = personFinder({ input: ui.blockUser, results: ui.blockResults, onPick: () => { ui.settingsError.textContent = ''; } });
  ui.nameForm.addEventListener('submit', saveName);
  ui.groupForm.addEventListener('submit', createGroup);
  ui.composer.addEventListener('submit', submitMessage);
  ui.input.addEventListener('input', onInput);
  ui.input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); ui.composer.requestSubmit(); }
    if (e.key === 'Escape' && state.editing) { e.preventDefault(); cancelEdit(); }
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
    state.following = nearBottom();
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
  window.addEventListener('online', () => { if (!conn.ws && state.auth) { conn.attempt = 0; connect(); } });
  // A pane that gets shorter (a smaller window, a taller draft, a phone keyboard) keeps its newest
  // message in view if it was there.
  new ResizeObserver(() => {
    const c = openConv();
    const w = openWindow();
    if (c && w && state.following && !w.hasAfter) ui.scroller.scrollTop = ui.scroller.scrollHeight;
  }).observe(ui.scroller);

  state.auth = loadAuth();
  if (state.auth) start();
  else showLogin();
})();
