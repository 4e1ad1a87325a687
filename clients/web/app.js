// app: the dashboard's entry point: the sign-in (a one-time code from the
// address, `/?code=...` as `ringctl dashboard` prints it, else a login form
// for an API token), hash routing (#/jobs, #/jobs/ID, #/workers, #/submit)
// and the DOM helper the pages share.

import { jobsPage } from './pages_jobs.js';
import { jobPage } from './pages_job.js';
import { workersPage } from './pages_workers.js';
import { submitPage } from './pages_submit.js';
import { routes, session, signIn, signOut } from './api.js';

// h('td', {class: 'x', onclick: fn}, child, ...): an element; children are
// nodes, strings or arrays of them; null and false are skipped.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k in el && typeof v !== 'string') el[k] = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  add(el, children);
  return el;
}

function add(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) add(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}

export function setMode(text) {
  document.getElementById('mode').textContent = text;
}

let current = null;

function route() {
  if (current && current.stop) current.stop();
  current = null;
  const main = document.getElementById('main');
  main.replaceChildren();
  setMode('');
  const hash = location.hash.replace(/^#/, '') || '/jobs';
  const parts = hash.split('/').filter(Boolean).map(decodeURIComponent);
  let nav = parts[0] || 'jobs';
  if (parts[0] === 'jobs' && parts[1]) current = jobPage(main, parts[1]);
  else if (parts[0] === 'workers') current = workersPage(main);
  else if (parts[0] === 'submit') current = submitPage(main);
  else { nav = 'jobs'; current = jobsPage(main, new URLSearchParams(hash.split('?')[1] || '')); }
  for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', a.dataset.nav === nav);
}

// The login form: paste an API token; signed in, the page starts.
function loginPage(message) {
  const main = document.getElementById('main');
  const input = h('input', { id: 'login-token', type: 'password', autocomplete: 'off', placeholder: 'rmt_...',
    size: 52 });
  const error = h('p', { id: 'login-error', class: 'error' }, message || '');
  const form = h('form', { id: 'login', class: 'login', onsubmit: async (e) => {
    e.preventDefault();
    const r = await signIn({ token: input.value.trim() });
    if (r.status === 200) { input.value = ''; start(); return; }
    error.textContent = (r.body && r.body.detail) || 'sign-in failed (HTTP ' + r.status + ')';
  } },
  h('h2', null, 'Sign in'),
  h('p', null, 'Paste an API token (ringctl token create, or the admin.token file beside the database), ',
    'or open the address that `ringctl dashboard` prints.'),
  h('label', null, 'Token ', input), ' ', h('button', { type: 'submit' }, 'Sign in'), error);
  main.replaceChildren(form);
  setMode('');
  input.focus();
}

let started = false;

function start() {
  document.getElementById('signout').hidden = false;
  if (!started) {
    started = true;
    routes(); // the route table, fetched once, alongside the first page's calls
    window.addEventListener('hashchange', route);
  }
  route();
}

async function boot() {
  document.getElementById('signout').addEventListener('click', async () => {
    await signOut();
    location.reload();
  });
  const params = new URLSearchParams(location.search);
  let message = '';
  if (params.has('code')) {
    const r = await signIn({ code: params.get('code') });
    // the code is spent either way: out of the address bar and the history
    history.replaceState(null, '', location.pathname + location.hash);
    if (r.status !== 200) message = (r.body && r.body.detail) || 'the login code was refused';
  }
  const who = await session();
  if (who.status === 200) start();
  else loginPage(message);
}

boot();
