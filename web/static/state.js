// The page's state and constants: the store (server data, written only by the frame dispatcher),
// what the page shows (shown), the tuning constants and storage keys, and small helpers that only
// read. It imports nothing, so every module can use it at any time.

// Tuning, each with its reason.
export const PAGE_SIZE = 50; // one history page; a screenful or three
export const MAX_WINDOW = 300; // messages kept per conversation; older ones are paged in again on scroll
export const EDGE_PX = 400; // load the next page when scrolled this close to an end
export const READ_DEBOUNCE_MS = 500; // coalesce read cursors while the user scrolls
export const REQUEST_TIMEOUT_MS = 15000; // the server bounds its own work at 10 s
export const SEND_TIMEOUT_MS = 12000; // the server answers a send within its 10 s send timeout
export const TYPING_SEND_EVERY_MS = 3000; // at most one typing frame per conversation this often
export const TYPING_SHOW_MS = 5000; // how long a typing push is shown
export const BACKOFF_BASE_MS = 500; // first reconnect delay, doubled per failed attempt
export const BACKOFF_MAX_MS = 15000; // reconnect delay cap
export const TOKEN_CHECK_EVERY_MS = 30000; // at most one token check per this long while failing
export const PAGE_RETRY_MS = 2000; // after a failed page load, scrolling tries again no sooner than this
export const HEARTBEAT_MS = 20000; // a ping frame this often finds a dead connection (browsers hide WebSocket pings)
export const PONG_TIMEOUT_MS = 10000; // no pong within this long: the connection is dead, reconnect
export const MAX_BODY_BYTES = 16384; // protocol.MaxBodyBytes: the server counts a body's UTF-8 bytes
export const LONG_BODY_CHARS = 1200; // a body longer than this, or of more lines than LONG_BODY_LINES, is collapsed
export const LONG_BODY_LINES = 14;
export const PREVIEW_CHARS = 600; // what a collapsed body shows; only this much is laid out until expanded
export const PREVIEW_LINES = 8;
export const RESEND_MAX_TRIES = 5; // automatic resends of one message refused as rate limited, per reconnect
export const AUTH_KEY = 'chatd.auth';
export const PENDING_KEY = 'chatd.pending.';
export const READS_KEY = 'chatd.reads.'; // read cursors sent while the page unloaded, in case they were lost
export const PRIVACY_KEY = 'chatd.privacy.'; // the receipts switch as last set here: the server has no frame that tells it
export const LONG_PRESS_MS = 500; // a touch held this long opens the message menu (the platform's own long-press is longer)
export const LONG_PRESS_SLOP_PX = 10; // a finger that moves further is scrolling, not pressing
export const USER_ID = /^[a-z0-9][a-z0-9_-]{0,63}$/; // auth.ValidUserID
export const QUOTE_CHARS = 80; // how much of a replied-to message its quote shows
export const LIST_PREVIEW_CHARS = 120; // how much of a conversation's newest message its list entry keeps (one line shows less)
export const MENU_SCROLL_CLOSE_PX = 40; // the message menu closes once its message has scrolled this far away
export const DELIVERED_DEBOUNCE_MS = 300; // coalesce delivered positions while a replay or a page arrives
export const PRESENCE_KEY = 'chatd.presence.'; // the presence switch as last set here: no frame tells it
export const NOTIFY_KEY = 'chatd.notify.'; // "Notify me" as set on this device ('on'); a browser's permission is per device too
export const NOTIFY_BODY_CHARS = 200; // how much of a message a desktop notification shows
export const PRESENCE_BATCH = 100; // users per presence request, the protocol's limit
export const PROFILES_BATCH = 100; // users per profiles request, the protocol's limit
export const NAMES_DEBOUNCE_MS = 30; // gather the ids a render asks for into one profiles request
export const FIND_DEBOUNCE_MS = 250; // wait for a pause in typing before asking find_users
export const FAVICON_PX = 64; // the drawn favicon's size; browsers scale it to the tab's 16 or 32 px
export const PHONE = '(max-width: 700px)'; // style.css's one-view-at-a-time layout

// ---- State ----------------------------------------------------------------------------------

// store is what the server has said: the conversations, their messages, names, presence, blocks
// and the sign-in. Only the frame dispatcher (dispatch.js) writes it, from server frames (pushes
// and the replies to requests) and the sign-in's answer; every other module only reads it and
// renders from it, so a view never holds a copy that can go stale.
export const store = {
  auth: null, // {token, userId, name}
  convs: new Map(), // id -> conversation view (see upsertConv)
  total: 0, // total unread, from badge frames
  windows: new Map(), // conversation id -> message window
  blocks: new Set(), // users this user blocks (list_blocks), for the DM menu and the settings panel
  presence: new Map(), // user id -> {online, lastSeen}: from presence pushes and presence_list replies
  names: new Map(), // user id -> {name, deleted}: from profiles replies and profile pushes
};

// shown is what the page shows and what the user is doing there, which no frame tells: the views
// and their handlers write it.
export const shown = {
  openId: null, // the conversation on screen
  divider: null, // {convId, afterSeq}: the "new messages" line of the open conversation
  expanded: new Set(), // "<conversation id>:<seq>" of long messages the user expanded
  following: true, // the open conversation is scrolled to its newest message and should stay there
  view: 0, // bumped when the open conversation or its window is replaced
  replyTo: new Map(), // conversation id -> seq the next send there answers (the composer shows it)
  editing: null, // {convId, seq, draft}: the own message the composer edits, and the draft it set aside
};

// ---- Small helpers ---------------------------------------------------------------------------

export function uuid() {
  if (window.crypto && typeof crypto.randomUUID === 'function') return crypto.randomUUID();
  // Pages served over plain http from another host are not a secure context: build a v4 uuid.
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

// userIdOf mirrors auth.UserIDFromName: lower case, runs of spaces to one dash.
export const userIdOf = (name) => name.trim().toLowerCase().split(/\s+/).join('-');

export function formatTime(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  const sameDay = d.toDateString() === new Date().toDateString();
  return sameDay ? d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })
    : d.toLocaleString([], { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' });
}

export const me = () => store.auth && store.auth.userId;

// initial is the first character of a name (a whole character: "李" or "Z", not half of an
// emoji's surrogate pair), for an avatar.
export const initial = (name) => ([...(name || '?')][0] || '?').toUpperCase();

export const openConv = () => store.convs.get(shown.openId);
export const openWindow = () => store.windows.get(shown.openId);

// dayKey names a local calendar day; dayLabel says it the way chat apps do.
export function dayKey(d) {
  return `${d.getFullYear()}-${String(d.getMonth() + 1).padStart(2, '0')}-${String(d.getDate()).padStart(2, '0')}`;
}

export function dayLabel(d) {
  const midnight = (x) => new Date(x.getFullYear(), x.getMonth(), x.getDate()).getTime();
  const days = Math.round((midnight(new Date()) - midnight(d)) / 86400000);
  if (days === 0) return 'Today';
  if (days === 1) return 'Yesterday';
  if (days > 1 && days < 7) return d.toLocaleDateString([], { weekday: 'long' });
  const sameYear = d.getFullYear() === new Date().getFullYear();
  return d.toLocaleDateString([], { weekday: 'short', day: 'numeric', month: 'long', year: sameYear ? undefined : 'numeric' });
}

// openMenu is the one menu open (menus.js), and the button that opened it. It lives here, in a
// module that imports nothing, because morph (dom.js) leaves that button's state as it is.
export const openMenu = { el: null, trigger: null };
