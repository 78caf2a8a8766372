// The console's shell: the login, the navigation and the hash router (#/topics...: the
// page is one document, so a reload or a bookmark lands on the same section, and no
// URL carries anything secret).

import { h, clear } from './dom.js';
import * as api from './api.js';
import { PAGES } from './pages.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const who = document.getElementById('who');
let current = null; // the page shown: {stop()} to end its timers

function showLogin(message) {
  stopPage();
  clear(nav);
  clear(who);
  const error = h('p', { class: 'error', role: 'alert', hidden: !message }, message || '');
  const user = h('input', { id: 'login-user', name: 'username', autocomplete: 'username', required: true });
  const pass = h('input', { id: 'login-password', name: 'password', type: 'password',
    autocomplete: 'current-password', required: true });
  const form = h('form', { class: 'card login', 'aria-label': 'Log in' },
    h('h2', {}, 'Log in'),
    h('p', {}, 'A gateway user tagged administrator (lmq users add NAME --tag administrator).'),
    h('div', { class: 'field' }, h('label', { for: 'login-user' }, 'User'), user),
    h('div', { class: 'field' }, h('label', { for: 'login-password' }, 'Password'), pass),
    h('button', { type: 'submit' }, 'Log in'), error);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    try {
      await api.login(user.value, pass.value);
      pass.value = '';
      await start();
    } catch (err) {
      error.hidden = false;
      error.textContent = err.message;
    }
  });
  clear(main).append(form);
  user.focus();
}

function renderNav(doc) {
  clear(nav);
  for (const page of PAGES) {
    nav.append(h('a', { href: `#/${page.id}`, dataset: { page: page.id } }, page.title));
  }
  clear(who);
  if (doc.mode === 'open') {
    who.append(h('span', { class: 'badge', title: 'no users file: loopback callers only' }, 'open mode'));
  } else {
    who.append(h('span', {}, doc.user), ' ',
      h('button', { type: 'button', class: 'small', onclick: async () => {
        try { await api.logout(); } finally { showLogin('Logged out.'); }
      } }, 'Log out'));
  }
}

function stopPage() {
  if (current && current.stop) current.stop();
  current = null;
}

function route() {
  const [id, ...rest] = (window.location.hash.replace(/^#\/?/, '') || 'overview').split('/');
  const page = PAGES.find((p) => p.id === id) || PAGES[0];
  stopPage();
  for (const a of nav.querySelectorAll('a')) {
    if (a.dataset.page === page.id) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  const container = h('div', { class: 'page' });
  clear(main).append(container);
  document.title = `${page.title} \u2013 LMQ Gateway`;
  current = page.render(container, rest.map(decodeURIComponent)) || null;
}

async function start() {
  let doc;
  try {
    doc = await api.session();
  } catch (err) {
    if (err.status === 401) { showLogin(); return; }
    clear(main).append(h('p', { class: 'error', role: 'alert' }, err.message));
    return;
  }
  renderNav(doc);
  route();
}

api.events.addEventListener('unauthorized', () => showLogin('Your session ended: log in again.'));
window.addEventListener('hashchange', () => { if (nav.firstChild) route(); });
start();
