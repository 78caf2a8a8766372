// A table over one of the admin API's list calls, paged, sorted and filtered by the
// server: the page holds one page of rows at a time (50 by default), so a list of
// 1,000,000 LMQs costs the browser what a list of 50 does. The API takes `limit`,
// `cursor`, `sort` (`-field`: descending) and `filter`, and answers
// {items: [...], next: cursor|null, total?: n}; "Next" sends `next` back as the
// cursor, "Previous" the one before it (kept here); sorting and filtering start again
// from the first page.

import { h, clear, debounce, number } from './dom.js';
import * as api from './api.js';

export class PagedTable {
  // columns: [{key, label, sort: bool, render: (row) => node|string, num: bool}]
  // actions: (row, table) => [nodes]
  // filterLabel: null for a list the API does not filter
  constructor({ path, columns, actions, query, pageSize = 50, filterLabel = 'Filter', sort, order }) {
    this.path = path;
    this.columns = columns;
    this.actions = actions;
    this.query = query || {};
    this.pageSize = pageSize;
    this.sort = sort || '';
    this.order = order || 'asc';
    this.filter = '';
    this.cursors = [null];
    this.error = h('p', { class: 'error', role: 'alert', hidden: true });
    this.status = h('span', { class: 'status' });
    this.body = h('tbody');
    this.head = h('tr');
    this.prev = h('button', { type: 'button', onclick: () => this.page(-1) }, '\u2039 Previous');
    this.next = h('button', { type: 'button', onclick: () => this.page(1) }, 'Next \u203a');
    const filter = filterLabel === null ? null : h('input', { type: 'search', placeholder: filterLabel,
      'aria-label': filterLabel, oninput: debounce((e) => { this.filter = e.target.value; this.restart(); }, 250) });
    this.node = h('section', { class: 'paged' },
      h('div', { class: 'toolbar' }, filter, h('span', { class: 'spacer' }), this.status, this.prev, this.next),
      this.error,
      h('div', { class: 'scroll' }, h('table', {}, h('thead', {}, this.head), this.body)));
    this.renderHead();
  }

  renderHead() {
    clear(this.head);
    for (const col of this.columns) {
      const active = this.sort === col.key;
      const mark = active ? (this.order === 'asc' ? ' \u25b2' : ' \u25bc') : '';
      const label = col.sort
        ? h('button', { type: 'button', class: 'sort', onclick: () => this.sortBy(col.key) }, col.label + mark)
        : col.label;
      this.head.append(h('th', {
        class: col.num ? 'num' : undefined,
        'aria-sort': active ? (this.order === 'asc' ? 'ascending' : 'descending') : undefined,
      }, label));
    }
    if (this.actions) this.head.append(h('th', {}, ''));
  }

  sortBy(key) {
    if (this.sort === key) this.order = this.order === 'asc' ? 'desc' : 'asc';
    else { this.sort = key; this.order = 'asc'; }
    this.renderHead();
    this.restart();
  }

  restart() { this.cursors = [null]; return this.load(); }
  reload() { return this.load(); }

  page(step) {
    if (step > 0 && this.nextCursor) this.cursors.push(this.nextCursor);
    else if (step < 0 && this.cursors.length > 1) this.cursors.pop();
    else return;
    this.load();
  }

  async load() {
    const after = this.cursors[this.cursors.length - 1];
    const sort = this.sort ? (this.order === 'desc' ? '-' : '') + this.sort : undefined;
    const query = { ...this.query, limit: this.pageSize, cursor: after, filter: this.filter || undefined, sort };
    const seq = (this.seq = (this.seq || 0) + 1);
    let doc;
    try {
      doc = await api.get(this.path, query);
    } catch (err) {
      if (seq !== this.seq) return;
      this.error.hidden = false;
      this.error.textContent = err.message;
      return;
    }
    if (seq !== this.seq) return; // a later load (typing in the filter) wins
    this.error.hidden = true;
    const items = doc.items || [];
    this.nextCursor = doc.next ?? null;
    clear(this.body);
    for (const row of items) {
      const tr = h('tr');
      for (const col of this.columns) {
        const value = col.render ? col.render(row) : row[col.key];
        tr.append(h('td', { class: col.num ? 'num' : undefined },
          value instanceof Node ? value : (col.num && typeof value === 'number' ? number(value, 2) : value ?? '')));
      }
      if (this.actions) tr.append(h('td', { class: 'actions' }, this.actions(row, this)));
      this.body.append(tr);
    }
    if (!items.length) {
      this.body.append(h('tr', {}, h('td', { colspan: this.columns.length + 1, class: 'none' },
        !this.filter ? 'none' : this.nextCursor
          ? 'nothing matches the filter in this part of the list: Next looks further'
          : 'nothing matches the filter')));
    }
    const first = (this.cursors.length - 1) * this.pageSize;
    const total = doc.total !== undefined && doc.total !== null ? ` of ${number(doc.total)}` : '';
    this.status.textContent = items.length ? `${number(first + 1)}\u2013${number(first + items.length)}${total}` : '';
    this.prev.disabled = this.cursors.length <= 1;
    this.next.disabled = !this.nextCursor;
  }
}
