// Shared pieces of the pages: the confirmation dialog, forms whose errors are shown
// where the operator looks (the API's detail, naming the field), action buttons and a
// notice line.

import { h } from './dom.js';

// Asks before a destructive action. With `typed`, the operator types that word (the
// name of what is deleted) before Confirm is enabled, as RabbitMQ's UI asks for
// deleting a vhost.
export function confirmAction(text, { typed, action = 'Confirm' } = {}) {
  const dialog = document.getElementById('confirm');
  const input = document.getElementById('confirm-typed');
  const ok = document.getElementById('confirm-ok');
  document.getElementById('confirm-text').textContent = text;
  document.getElementById('confirm-typed-label').hidden = !typed;
  document.getElementById('confirm-word').textContent = typed || '';
  ok.textContent = action;
  input.value = '';
  ok.disabled = Boolean(typed);
  input.oninput = () => { ok.disabled = input.value !== typed; };
  return new Promise((resolve) => {
    dialog.onclose = () => resolve(dialog.returnValue === 'ok');
    dialog.returnValue = 'cancel';
    dialog.showModal();
    (typed ? input : ok).focus();
  });
}

// The banner at the top of a page: what an action did, or why it failed.
export class Notice {
  constructor() { this.node = h('p', { class: 'notice', role: 'status', hidden: true }); }
  ok(text) { this.show(text, 'ok'); }
  fail(text) { this.show(text, 'error'); }
  show(text, kind) {
    this.node.hidden = false;
    this.node.className = `notice ${kind}`;
    this.node.setAttribute('role', kind === 'error' ? 'alert' : 'status');
    this.node.textContent = text;
  }
}

// A button that runs `fn` (async), after a confirmation when `confirm` is given,
// reporting to `notice`: `done` (a string or a function of fn's result) on success,
// the API's detail on failure. `after` runs on success (reload a table).
export function actionButton(label, fn, { notice, confirm, typed, done, after, danger } = {}) {
  const button = h('button', { type: 'button', class: danger ? 'danger small' : 'small' }, label);
  button.addEventListener('click', async () => {
    if (confirm && !(await confirmAction(confirm, { typed, action: label }))) return;
    button.disabled = true;
    try {
      const result = await fn();
      if (notice && done) notice.ok(typeof done === 'function' ? done(result) : done);
      if (after) await after(result);
    } catch (err) {
      if (notice) notice.fail(`${label} failed: ${err.message}`);
    } finally {
      button.disabled = false;
    }
  });
  return button;
}

// A form: fields [{name, label, type, options, value, required, placeholder, help}];
// `submit(values)` may throw an ApiError, shown under the form; a change returns its
// message (shown, and the form cleared), a query returns '' (the form kept). The
// browser's own checks (required, min) run first.
export function form({ title, fields, submitLabel, submit, notice }) {
  const error = h('p', { class: 'error', role: 'alert', hidden: true });
  const inputs = {};
  const rows = fields.map((f) => {
    let input;
    if (f.options) {
      input = h('select', { name: f.name, id: `f-${f.name}` },
        f.options.map((o) => h('option', { value: o, selected: o === f.value }, o)));
    } else {
      input = h('input', { name: f.name, id: `f-${f.name}`, type: f.type || 'text', value: f.value,
        required: f.required, placeholder: f.placeholder, min: f.min, autocomplete: 'off' });
    }
    inputs[f.name] = input;
    return h('div', { class: 'field' }, h('label', { for: `f-${f.name}` }, f.label), input,
      f.help ? h('small', {}, f.help) : null);
  });
  const button = h('button', { type: 'submit' }, submitLabel);
  const node = h('form', { class: 'card form', 'aria-label': title }, h('h3', {}, title), rows, button, error);
  node.addEventListener('submit', async (event) => {
    event.preventDefault();
    const values = {};
    for (const [name, input] of Object.entries(inputs)) values[name] = input.value;
    button.disabled = true;
    error.hidden = true;
    try {
      const message = await submit(values);
      if (message) { // a change was made: say so, and clear the form for the next one
        if (notice) notice.ok(message);
        node.reset();
      }
    } catch (err) {
      error.hidden = false;
      error.textContent = err.message;
    } finally {
      button.disabled = false;
    }
  });
  return node;
}
