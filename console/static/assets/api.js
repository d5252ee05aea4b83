// The broker's HTTP API as the console calls it: same origin, JSON, and the
// operator's token (when the broker asks for one) as Authorization: Bearer.
//
// The token is asked for once, when a call answers 401, in the sign-in
// dialog of index.html, and kept in sessionStorage: it lives as long as the
// tab and is never written anywhere else. Calls that meet a 401 wait for
// the dialog and are then retried with the new token.

const TOKEN_KEY = 'queen.console.token';

/** An answer that is not 2xx: status, the broker's {"error"} text, the path. */
export class ApiError extends Error {
  constructor(status, message, path) {
    super(message);
    this.status = status;
    this.path = path;
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

export function signOut() {
  sessionStorage.removeItem(TOKEN_KEY);
}

let pendingLogin = null;

// askToken shows the sign-in dialog (once for every call waiting on it) and
// resolves when a token has been entered.
function askToken(reason) {
  if (pendingLogin) return pendingLogin;
  pendingLogin = new Promise((resolve) => {
    const dlg = document.getElementById('login');
    const form = document.getElementById('login-form');
    const input = document.getElementById('login-token');
    document.getElementById('login-reason').textContent =
      token() ? 'The token was refused: ' + reason : 'The broker answered: ' + reason;
    input.value = '';
    const done = (ev) => {
      ev.preventDefault();
      const t = input.value.trim().replace(/^bearer\s+/i, '');
      if (!t) return;
      sessionStorage.setItem(TOKEN_KEY, t);
      form.removeEventListener('submit', done);
      dlg.removeEventListener('cancel', keep);
      dlg.close();
      pendingLogin = null;
      document.dispatchEvent(new CustomEvent('queen:signed-in'));
      resolve();
    };
    const keep = (ev) => ev.preventDefault(); // Escape does not dismiss it: nothing works without a token
    form.addEventListener('submit', done);
    dlg.addEventListener('cancel', keep);
    dlg.showModal();
    input.focus();
  });
  return pendingLogin;
}

async function readJSON(r) {
  const text = await r.text();
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch {
    return { error: text.slice(0, 200) };
  }
}

/**
 * api calls path (starting with "/") and returns the decoded JSON body, or
 * null for an empty one (204). opts: method (GET), body (sent as JSON),
 * accept (statuses other than 2xx returned as data instead of thrown, e.g.
 * [503] for /health). Throws ApiError for any other status; a 401 first
 * asks for a token and retries.
 */
export async function api(path, opts = {}) {
  const method = opts.method || 'GET';
  for (;;) {
    const headers = { Accept: 'application/json' };
    const t = token();
    if (t) headers.Authorization = 'Bearer ' + t;
    let body;
    if (opts.body !== undefined) {
      headers['Content-Type'] = 'application/json';
      body = JSON.stringify(opts.body);
    }
    let r;
    try {
      r = await fetch(path, { method, headers, body, cache: 'no-store', credentials: 'omit' });
    } catch (e) {
      throw new ApiError(0, 'the broker did not answer (' + e.message + ')', path);
    }
    const data = r.status === 204 ? null : await readJSON(r);
    if (r.status === 401) {
      await askToken((data && data.error) || 'authentication required');
      continue;
    }
    if (r.ok || (opts.accept && opts.accept.includes(r.status))) return data;
    throw new ApiError(r.status, (data && data.error) || r.statusText || 'HTTP ' + r.status, path);
  }
}

/** seg percent-encodes one path segment (queue, group, partition names). */
export function seg(s) {
  return encodeURIComponent(s);
}

/** query builds "?a=1&b=2" from an object, leaving out empty values. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const s = q.toString();
  return s ? '?' + s : '';
}
