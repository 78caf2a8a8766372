// The admin API as the console calls it (same origin, /v1/admin/). The session cookie is
// HttpOnly: the page never sees it; the CSRF token comes with the session document and
// is kept in memory only (never in storage, never in a URL) and sent as X-CSRF-Token on
// every call that changes something. An error is thrown as ApiError with the problem
// document's detail, which pages show as it is (the API names the field at fault).

const BASE = '/v1/admin';
let csrfToken = '';

export class ApiError extends Error {
  constructor(status, detail, doc) {
    super(detail);
    this.status = status;
    this.doc = doc || {};
  }
}

// 401 from any call: the session ended; the app shows the login form again.
export const events = new EventTarget();

export function setCsrf(token) { csrfToken = token || ''; }

function url(path, query) {
  const u = new URL(path.startsWith('/console/') ? path : BASE + path, window.location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null && v !== '') u.searchParams.set(k, v);
  }
  return u.pathname + u.search;
}

export async function call(method, path, { query, body } = {}) {
  // X-Lmq-Console: a 401 then comes without a Basic challenge (no browser login popup)
  const headers = { Accept: 'application/json', 'X-Lmq-Console': '1' };
  if (method !== 'GET') headers['X-CSRF-Token'] = csrfToken;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let response;
  try {
    response = await fetch(url(path, query), {
      method, headers, credentials: 'same-origin', cache: 'no-store',
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (err) {
    throw new ApiError(0, `the gateway cannot be reached (${err.message})`);
  }
  const text = await response.text();
  let doc = null;
  try { doc = text ? JSON.parse(text) : null; } catch { doc = null; }
  if (!response.ok) {
    const detail = (doc && (doc.detail || doc.title)) || `${response.status} ${response.statusText}`;
    const error = new ApiError(response.status, detail, doc);
    if (response.status === 401 && !path.startsWith('/console/')) {
      events.dispatchEvent(new CustomEvent('unauthorized', { detail: error }));
    }
    throw error;
  }
  return doc;
}

export const get = (path, query) => call('GET', path, { query });
export const post = (path, body) => call('POST', path, { body: body ?? {} });
export const put = (path, body) => call('PUT', path, { body: body ?? {} });
export const patch = (path, body) => call('PATCH', path, { body: body ?? {} });
export const del = (path, query) => call('DELETE', path, { query });

// One path segment (a topic "a/b" is one segment, sent as a%2Fb).
export const seg = (value) => encodeURIComponent(String(value));

// The console's session (gateway/http/console): who is logged in, and the CSRF token.
export async function session() {
  const doc = await call('GET', '/console/session');
  setCsrf(doc.csrf_token);
  return doc;
}

export async function login(username, password) {
  const doc = await call('POST', '/console/session', { body: { username, password } });
  setCsrf(doc.csrf_token);
  return doc;
}

export async function logout() {
  await call('DELETE', '/console/session');
  setCsrf('');
}
