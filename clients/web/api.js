// api: the REST calls the dashboard makes (api/openapi.yaml), and which
// optional routes this coordinator serves (GET /assets/routes.json, the
// daemon's route table), so the pages never request a route that is absent.
// The page is signed in by its session cookie (HttpOnly: this code never
// sees it); every POST carries the session's CSRF token in X-CSRF-Token.

let csrf = null;

// GET /v1/session: {status, body}; remembers the session's CSRF token.
export async function session() {
  const r = await call('GET', '/v1/session');
  if (r.status === 200 && r.body) csrf = r.body.csrf;
  return r;
}

// POST /v1/session with {token} or {code}: {status, body}.
export async function signIn(credential) {
  const r = await call('POST', '/v1/session', JSON.stringify(credential));
  if (r.status === 200 && r.body) csrf = r.body.csrf;
  return r;
}

export async function signOut() {
  const r = await call('POST', '/v1/session/logout');
  csrf = null;
  return r;
}

let routesPromise = null;

// The set of "METHOD /path/template" rows the daemon serves.
export function routes() {
  if (!routesPromise) {
    routesPromise = fetch('/assets/routes.json', { cache: 'no-cache' })
      .then((r) => (r.ok ? r.json() : { routes: [] }))
      .then((d) => new Set(d.routes.map((x) => x.method + ' ' + x.path)))
      .catch(() => new Set());
  }
  return routesPromise;
}

export async function has(method, path) {
  return (await routes()).has(method + ' ' + path);
}

// GET `path`: {status, body} (body parsed as JSON when it is JSON, else
// null). Network failures give status 0.
export async function get(path) {
  return call('GET', path);
}

export async function post(path, body) {
  return call('POST', path, body);
}

async function call(method, path, body) {
  let r;
  try {
    const headers = body === undefined ? {} : { 'Content-Type': 'application/json' };
    if (method !== 'GET' && csrf) headers['X-CSRF-Token'] = csrf;
    r = await fetch(path, {
      method,
      headers,
      credentials: 'same-origin',
      body: body === undefined ? undefined : body,
      cache: 'no-store',
    });
  } catch (e) {
    return { status: 0, body: null, error: String(e) };
  }
  let parsed = null;
  const type = r.headers.get('Content-Type') || '';
  if (type.includes('json')) {
    try { parsed = await r.json(); } catch { parsed = null; }
  }
  return { status: r.status, body: parsed };
}

export const enc = encodeURIComponent;
