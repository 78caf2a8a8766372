// The console's sections. Each page is {id, title, render(container, args)}; render
// returns {stop()} when it keeps timers. The data and every change go through the
// admin API (api.js); tables page on the server (table.js).

import { h, bytes, number, duration, time } from './dom.js';
import * as api from './api.js';
import { seg } from './api.js';
import { LineChart } from './chart.js';
import { PagedTable } from './table.js';
import { Notice, actionButton, confirmAction, form } from './ui.js';

const MESSAGE_TYPES = ['NORMAL', 'FIFO', 'DELAY', 'TRANSACTION', 'MIXED'];

function heading(title, ...extra) {
  return h('div', { class: 'heading' }, h('h2', {}, title), ...extra);
}

const link = (hash, text) => h('a', { href: hash }, text);

// -- overview ------------------------------------------------------------------------

const SAMPLES_KEPT = 720; // an hour at 5 s, as the gateway keeps them

function overview(container) {
  const cards = h('div', { class: 'cards' });
  const error = h('p', { class: 'error', role: 'alert', hidden: true });
  const rate = (v) => number(v, v < 10 ? 2 : 0);
  const charts = {
    in: new LineChart('Messages in / s', rate),
    out: new LineChart('Messages out / s', rate),
    connections: new LineChart('Connections', (v) => number(v), { integer: true }),
    store: new LineChart('Store size', bytes),
    lag: new LineChart('Store lag (appends waiting)', (v) => number(v), { integer: true }),
  };
  const notice = new Notice();
  const verifyStatus = h('span', { class: 'status verify', role: 'status' });
  let verifyTimer = 0;
  const showVerify = (v) => {
    const pct = `${(100 * (v.log_progress || 0)).toFixed(1)}%`;
    if (v.state === 'running') {
      verifyStatus.textContent = `verifying: ${pct} of the log, ${number(v.records)} records`;
    } else if (v.ok) {
      verifyStatus.textContent = `verified: ${number(v.records)} records, ${bytes(v.bytes)}, ${number(v.entries_checked)} index entries: no problem`;
    } else {
      verifyStatus.textContent = `verify found problems: ${[v.error, ...(v.problems || [])].filter(Boolean).join('; ')}`;
    }
  };
  const pollVerify = async () => {
    try {
      const v = await api.get('/store/verify');
      showVerify(v);
      if (v.state === 'running') verifyTimer = setTimeout(pollVerify, 1000);
    } catch (err) { verifyStatus.textContent = err.message; }
  };
  const verify = actionButton('Verify the store', async () => {
    await api.post('/store/verify', { check_index: true });
    clearTimeout(verifyTimer);
    await pollVerify();
  }, { notice });
  container.append(heading('Overview'), notice.node, error, cards,
    h('p', { class: 'store-tools' }, verify, ' ', verifyStatus),
    h('div', { class: 'charts' }, Object.values(charts).map((c) => c.node)));
  const samples = [];
  let since = 0;

  function card(label, value, id) {
    return h('div', { class: 'card stat', dataset: { stat: id } }, h('span', { class: 'label' }, label),
      h('span', { class: 'value' }, value));
  }

  function series(pick) {
    const names = new Set();
    for (const s of samples) for (const k of Object.keys(pick(s) || {})) names.add(k);
    return [...names].sort().map((name) => ({
      name, points: samples.map((s) => [s.t, (pick(s) || {})[name] || 0]),
    }));
  }

  async function refresh() {
    try {
      const [doc, history] = await Promise.all([
        api.get('/overview'), api.get('/overview/history', { since }),
      ]);
      error.hidden = true;
      const conns = doc.connections || {};
      const store = doc.store || {};
      const proc = doc.process || {};
      cards.replaceChildren(
        card('Version', doc.version, 'version'),
        card('Uptime', duration(doc.uptime_seconds), 'uptime'),
        card('Connections', number(conns.total), 'connections'),
        card('Store', bytes(store.bytes), 'store'),
        card('Segments', number(store.segments), 'segments'),
        card('LMQs', number(store.lmqs), 'lmqs'),
        card('Store lag', number(store.publisher_pending), 'lag'),
        card('Memory', bytes(proc.rss_bytes), 'memory'),
        card('Open files', number(proc.open_files), 'files'),
      );
      for (const s of history.samples || []) {
        samples.push(s);
        since = Math.max(since, s.t);
      }
      samples.splice(0, Math.max(0, samples.length - SAMPLES_KEPT));
      // stored (every door) first and dashed: the protocols' lines stay visible over it
      charts.in.update([{ name: 'stored', dash: true, points: samples.map((s) => [s.t, s.stored]) }, ...series((s) => s.in)]);
      charts.out.update(series((s) => s.out));
      charts.connections.update(series((s) => s.connections));
      charts.store.update([{ name: 'commit log', points: samples.map((s) => [s.t, s.store_bytes]) }]);
      charts.lag.update([{ name: 'pending', points: samples.map((s) => [s.t, s.store_lag]) }]);
    } catch (err) {
      error.hidden = false;
      error.textContent = err.message;
    }
  }
  refresh();
  const timer = setInterval(refresh, 5000);
  return { stop: () => { clearInterval(timer); clearTimeout(verifyTimer); } };
}

// -- connections and sessions --------------------------------------------------------

function connections(container) {
  const notice = new Notice();
  const table = new PagedTable({
    path: '/connections', filterLabel: 'Filter by id, peer, client id or user', sort: 'id',
    columns: [
      { key: 'id', label: 'Id', sort: true, num: true },
      { key: 'protocol', label: 'Protocol', sort: true },
      { key: 'listener', label: 'Listener', sort: true },
      { key: 'peer', label: 'Peer', sort: true },
      { key: 'client_id', label: 'Client id', sort: true },
      { key: 'user', label: 'User', sort: true },
      { key: 'bytes_in', label: 'In', sort: true, num: true, render: (r) => bytes(r.bytes_in) },
      { key: 'bytes_out', label: 'Out', sort: true, num: true, render: (r) => bytes(r.bytes_out) },
      { key: 'messages_in', label: 'Msgs in', sort: true, num: true },
      { key: 'messages_out', label: 'Msgs out', sort: true, num: true },
      { key: 'age_seconds', label: 'Age', sort: true, num: true, render: (r) => duration(r.age_seconds) },
    ],
    actions: (row, t) => [actionButton('Close', () => api.del(`/connections/${seg(row.id)}`), {
      notice, danger: true, confirm: `Close connection ${row.id} (${row.protocol} ${row.client_id || ''} from ${row.peer})? The client sees its connection end.`,
      done: `Connection ${row.id} closed.`, after: () => t.reload(),
    })],
  });
  container.append(heading('Connections'), notice.node, table.node);
  table.load();
}

function sessions(container) {
  const notice = new Notice();
  const table = new PagedTable({
    path: '/mqtt/sessions', filterLabel: 'Filter by client id', sort: 'name',
    columns: [
      { key: 'name', label: 'Client id', sort: true },
      { key: 'connected', label: 'Connected', sort: true, render: (r) => (r.connected ? 'yes' : 'no') },
      { key: 'user', label: 'User', sort: true },
      { key: 'subscriptions', label: 'Subscriptions', sort: true, num: true },
      { key: 'backlog', label: 'Backlog', sort: true, num: true },
      { key: 'inflight', label: 'In flight', sort: true, num: true },
      { key: 'disconnected_ms', label: 'Offline since', render: (r) => (r.connected ? '' : time(r.disconnected_ms)) },
      { key: 'expiry_seconds', label: 'Expiry', num: true, render: (r) => (r.expiry_seconds >= 0xffffffff ? 'never' : duration(r.expiry_seconds)) },
    ],
    actions: (row, t) => [
      actionButton('Filters', async () => {
        const doc = await api.get(`/mqtt/sessions/${seg(row.client_id)}`);
        return (doc.subscription_list || []).map((x) => `${x.filter} (QoS ${x.qos}${x.share_group ? `, share ${x.share_group}` : ''}, backlog ${x.backlog ?? '-'})`).join('; ') || 'none';
      }, { notice, done: (text) => `${row.client_id}: ${text}` }),
      actionButton('Kick', () => api.del(`/mqtt/sessions/${seg(row.client_id)}`), {
        notice, danger: true, confirm: `Kick session ${row.client_id}? Its connection is closed and its subscriptions and state discarded.`,
        done: `Session ${row.client_id} kicked.`, after: () => t.reload(),
      }),
    ],
  });
  container.append(heading('MQTT sessions'), notice.node, table.node);
  table.load();
}

// -- topics and LMQs -----------------------------------------------------------------

function topics(container) {
  const notice = new Notice();
  const table = new PagedTable({
    path: '/topics', filterLabel: 'Filter by topic', sort: 'name',
    columns: [
      { key: 'name', label: 'Topic', sort: true },
      { key: 'message_type', label: 'Type', sort: true },
      { key: 'read_queues', label: 'Read queues', sort: true, num: true },
      { key: 'write_queues', label: 'Write queues', sort: true, num: true },
      { key: 'perm_text', label: 'Permission' },
      { key: 'messages', label: 'Messages', num: true },
    ],
    actions: (row, t) => [
      h('button', { type: 'button', class: 'small', onclick: () => {
        const f = (field) => change.elements.namedItem(field);
        f('name').value = row.name;
        f('queues').value = String(row.write_queues);
        f('message_type').value = row.message_type;
        f('perm').value = row.perm_text;
        f('queues').focus();
      } }, 'Change'),
      actionButton('Delete', () => api.del(`/topics/${seg(row.name)}`), {
        notice, danger: true, typed: row.name,
        confirm: `Delete topic ${row.name} and its queues? Its messages can no longer be consumed.`,
        done: `Topic ${row.name} deleted.`, after: () => t.reload(),
      }),
    ],
  });
  const create = form({
    title: 'Create a topic', submitLabel: 'Create', notice,
    fields: [
      { name: 'name', label: 'Name', required: true, placeholder: 'orders' },
      { name: 'queues', label: 'Queues', type: 'number', value: '8', min: 1 },
      { name: 'message_type', label: 'Message type', options: MESSAGE_TYPES, value: 'NORMAL' },
    ],
    submit: async (v) => {
      const queues = v.queues === '' ? undefined : Number(v.queues);
      // PUT creates or changes: a create form must not change an existing topic
      const exists = await api.get(`/topics/${seg(v.name)}`).then(() => true, (err) => {
        if (err.status === 404) return false;
        throw err;
      });
      if (exists) throw new Error(`topic ${v.name} exists already (change it in the table)`);
      await api.put(`/topics/${seg(v.name)}`, { queues, message_type: v.message_type });
      table.restart();
      return `Topic ${v.name} created.`;
    },
  });
  const change = form({
    title: 'Change a topic', submitLabel: 'Change', notice,
    fields: [
      { name: 'name', label: 'Topic', required: true },
      { name: 'queues', label: 'Queues (read and write)', type: 'number', min: 1 },
      { name: 'message_type', label: 'Message type', options: MESSAGE_TYPES, value: 'NORMAL' },
      { name: 'perm', label: 'Permission', options: ['rw', 'r', 'w', '-'], value: 'rw' },
    ],
    submit: async (v) => {
      await api.get(`/topics/${seg(v.name)}`); // 404 for a topic that does not exist
      const body = { message_type: v.message_type, perm: v.perm };
      if (v.queues !== '') body.queues = Number(v.queues);
      await api.put(`/topics/${seg(v.name)}`, body);
      table.reload();
      return `Topic ${v.name} changed.`;
    },
  });
  container.append(heading('RocketMQ topics'), notice.node, h('div', { class: 'forms' }, create, change), table.node);
  table.load();
}

function lmqs(container) {
  const notice = new Notice();
  const table = new PagedTable({
    path: '/lmqs', filterLabel: 'Filter by name', sort: 'name',
    columns: [
      { key: 'name', label: 'LMQ', render: (r) => link(`#/messages/lmq/${encodeURIComponent(r.name)}`, r.name) },
      { key: 'messages', label: 'Messages', num: true },
      { key: 'bytes', label: 'Bytes', num: true, render: (r) => bytes(r.bytes) },
      { key: 'min_offset', label: 'First offset', num: true },
      { key: 'max_offset', label: 'End offset', num: true },
      { key: 'last_write_ms', label: 'Last write', render: (r) => time(r.last_write_ms) },
    ],
  });
  const clean = form({
    title: 'Clean idle LMQs (the topics clean rules)', submitLabel: 'Clean\u2026', notice,
    fields: [
      { name: 'prefix', label: 'Name prefix (empty: any)', placeholder: 'mqtt:sensors/' },
      { name: 'idle', label: 'Idle for at least (seconds; empty: any)', type: 'number', min: 0 },
    ],
    submit: async (v) => {
      const body = { prefix: v.prefix || undefined, idle_ms: v.idle === '' ? undefined : Number(v.idle) * 1000 };
      const dry = await api.post('/lmqs/clean', { ...body, dry_run: true });
      if (!dry.lmqs) return 'No LMQ matches: nothing to clean.';
      const names = (dry.items || []).slice(0, 5).map((i) => i.name).join(', ');
      const text = `Remove ${number(dry.lmqs)} LMQs (${number(dry.messages)} messages, ${bytes(dry.bytes)}): ${names}${dry.lmqs > 5 ? ', \u2026' : ''}?`;
      if (!(await confirmAction(text, { action: 'Remove' }))) return 'Nothing removed.';
      const done = await api.post('/lmqs/clean', { ...body, dry_run: false });
      table.restart();
      return `${number((done.removed || {}).lmqs ?? done.lmqs)} LMQs removed.`;
    },
  });
  container.append(heading('LMQs'), notice.node, clean, table.node);
  table.load();
}

// -- consumer groups -----------------------------------------------------------------

function groups(container, args) {
  if (args[0]) return group(container, args[0]);
  const notice = new Notice();
  const table = new PagedTable({
    path: '/groups', filterLabel: 'Filter by group', sort: 'name',
    columns: [
      { key: 'name', label: 'Group', sort: true, render: (r) => link(`#/groups/${encodeURIComponent(r.name)}`, r.name) },
      { key: 'topics', label: 'Topics', render: (r) => (r.topics || []).join(', ') },
      { key: 'queues', label: 'Queues', sort: true, num: true },
      { key: 'lag', label: 'Lag', sort: true, num: true },
      { key: 'configured', label: 'Configured', render: (r) => (r.configured ? 'yes' : 'no') },
    ],
  });
  container.append(heading('Consumer groups'), notice.node, table.node);
  table.load();
  return null;
}

function group(container, name) {
  const notice = new Notice();
  const body = h('div');
  const title = heading(`Group ${name}`, link('#/groups', '\u2190 all groups'));
  async function load() {
    let doc;
    try {
      doc = await api.get(`/groups/${seg(name)}`);
    } catch (err) { notice.fail(err.message); return; }
    const rows = (doc.queues || []).map((q) => h('tr', {},
      h('td', {}, q.topic), h('td', { class: 'num' }, number(q.queue_id)),
      h('td', { class: 'num' }, number(q.offset)), h('td', { class: 'num' }, number(q.max_offset)),
      h('td', { class: 'num' }, number(q.lag)), h('td', { class: 'num' }, number(q.in_flight)),
      h('td', { class: 'actions' }, q.in_flight ? h('button', {
        type: 'button', class: 'small', onclick: () => { flightFrom = [-1]; inFlight(q); },
      }, 'In flight') : '')));
    const blocked = (doc.blocked_message_groups || []).map((b) => h('tr', {},
      h('td', {}, b.topic ?? b.lmq), h('td', { class: 'num' }, number(b.queue_id)), h('td', {}, b.message_group),
      h('td', { class: 'num' }, number(b.deliveries)), h('td', { class: 'num' }, number(b.waiting)),
      h('td', {}, time(b.since_ms)),
      h('td', { class: 'actions' }, actionButton('Release', () => api.post(`/groups/${seg(name)}/release`,
        { topic: b.topic, message_group: b.message_group }), {
        notice, confirm: `Release FIFO message group ${b.message_group} of ${name} on ${b.topic}? Its head message is given up (dead-lettered) so the messages behind it flow.`,
        done: `Message group ${b.message_group} released.`, after: load,
      }))));
    const blockedTable = blocked.length ? [h('h3', {}, 'Blocked FIFO message groups'),
      h('div', { class: 'scroll' }, h('table', { class: 'blocked' },
        h('thead', {}, h('tr', {}, ['Topic', 'Queue', 'Message group', 'Deliveries', 'Waiting', 'Since', ''].map((t) => h('th', {}, t)))),
        h('tbody', {}, blocked)))] : [];
    body.replaceChildren(
      h('p', { class: 'summary' }, `Total lag: ${number(doc.lag)} \u00b7 in flight: ${number(doc.in_flight)}`
        + ` \u00b7 blocked FIFO message groups: ${number((doc.blocked_message_groups || []).length)}`),
      h('div', { class: 'scroll' }, h('table', { class: 'queues' },
        h('thead', {}, h('tr', {}, ['Topic', 'Queue', 'Offset', 'End offset', 'Lag', 'In flight', ''].map((t, i) => h('th', { class: i && i < 6 ? 'num' : undefined }, t)))),
        h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: 7, class: 'none' }, 'no queue consumed yet'))))),
      ...blockedTable);
    if (flightQueue) {
      const q = (doc.queues || []).find((x) => x.lmq === flightQueue.lmq);
      if (q) inFlight(q); else flight.replaceChildren();
    }
  }
  // The messages in flight (popped, not acked) on one queue, paged by offset; read-only.
  const flight = h('div', { class: 'inflight' });
  let flightQueue = null;
  let flightFrom = [-1]; // the "after" of each page shown so far (Previous goes back)
  async function inFlight(q) {
    flightQueue = q;
    const after = flightFrom[flightFrom.length - 1];
    let doc;
    try {
      doc = await api.get(`/groups/${seg(name)}/inflight`, { lmq: q.lmq, limit: 50, ...(after >= 0 ? { after } : {}) });
    } catch (err) { notice.fail(err.message); return; }
    const rows = doc.items.map((m) => h('tr', {},
      h('td', { class: 'num' }, number(m.offset)), h('td', {}, m.message_id ?? ''),
      h('td', { class: 'num' }, number(m.deliveries)), h('td', {}, time(m.popped_ms)),
      h('td', {}, time(m.invisible_until_ms))));
    const pager = h('div', { class: 'toolbar' },
      h('button', { type: 'button', disabled: flightFrom.length < 2, onclick: () => { flightFrom.pop(); inFlight(q); } }, 'Previous'),
      h('button', { type: 'button', disabled: doc.next === null, onclick: () => { flightFrom.push(doc.next); inFlight(q); } }, 'Next'),
      h('button', { type: 'button', onclick: () => { flightQueue = null; flight.replaceChildren(); } }, 'Close'));
    flight.replaceChildren(
      h('h3', {}, `In flight on ${q.topic} queue ${q.queue_id}`),
      h('div', { class: 'scroll' }, h('table', { class: 'in-flight' },
        h('thead', {}, h('tr', {}, ['Offset', 'Message id', 'Deliveries', 'Popped', 'Invisible until'].map((t) => h('th', {}, t)))),
        h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: 5, class: 'none' }, 'nothing in flight'))))),
      pager);
  }
  const reset = form({
    title: 'Reset offsets', submitLabel: 'Reset', notice,
    fields: [
      { name: 'topic', label: 'Topic', required: true },
      { name: 'to', label: 'To', options: ['earliest', 'latest', 'time'], value: 'earliest' },
      { name: 'time', label: 'Time (for "time")', type: 'datetime-local' },
    ],
    submit: async (v) => {
      let to = { position: v.to };
      if (v.to === 'time') {
        const ms = Date.parse(v.time);
        if (Number.isNaN(ms)) throw new Error('give the time to reset to');
        to = { timestamp_ms: ms };
      }
      await api.post(`/groups/${seg(name)}/reset`, { topic: v.topic, ...to });
      await load();
      return `Group ${name} reset to ${v.to === 'time' ? v.time : v.to} on ${v.topic}.`;
    },
  });
  const remove = actionButton('Delete group', () => api.del(`/groups/${seg(name)}`), {
    notice, danger: true, typed: name, confirm: `Delete consumer group ${name} and its offsets?`,
    after: () => { window.location.hash = '#/groups'; },
  });
  container.append(title, notice.node, body, flight, reset, h('p', {}, remove));
  load();
  const timer = setInterval(load, 5000);
  return { stop: () => clearInterval(timer) };
}

// -- AMQP ------------------------------------------------------------------------------

function amqp(container) {
  const notice = new Notice();
  const queues = new PagedTable({
    path: '/amqp/queues', filterLabel: 'Filter queues', sort: 'name',
    columns: [
      { key: 'vhost', label: 'Vhost', sort: true },
      { key: 'name', label: 'Queue', sort: true },
      { key: 'messages', label: 'Ready', sort: true, num: true },
      { key: 'unacked', label: 'Unacked', sort: true, num: true },
      { key: 'consumers', label: 'Consumers', sort: true, num: true },
      { key: 'stored_per_s', label: 'In / s', num: true },
      { key: 'settled_per_s', label: 'Settled / s', num: true },
      { key: 'durable', label: 'Durable', render: (r) => (r.durable ? 'yes' : 'no') },
      { key: 'exclusive', label: 'Exclusive', render: (r) => (r.exclusive ? 'yes' : 'no') },
    ],
    actions: (row, t) => {
      const path = `/amqp/queues/${seg(row.vhost)}/${seg(row.name)}`;
      return [
        actionButton('Purge', () => api.post(`${path}/purge`), {
          notice, danger: true, confirm: `Purge every ready message of queue ${row.name} (vhost ${row.vhost})?`,
          done: (r) => `Queue ${row.name} purged: ${number(r.purged)} messages dropped.`, after: () => t.reload(),
        }),
        actionButton('Delete', () => api.del(path), {
          notice, danger: true, typed: row.name, confirm: `Delete queue ${row.name} (vhost ${row.vhost})? Its consumers are cancelled.`,
          done: `Queue ${row.name} deleted.`, after: () => t.reload(),
        }),
      ];
    },
  });
  const exchanges = new PagedTable({
    path: '/amqp/exchanges', filterLabel: 'Filter exchanges', sort: 'name',
    columns: [
      { key: 'vhost', label: 'Vhost', sort: true },
      { key: 'name', label: 'Exchange', sort: true, render: (r) => r.name || '(default)' },
      { key: 'type', label: 'Type', sort: true },
      { key: 'durable', label: 'Durable', render: (r) => (r.durable ? 'yes' : 'no') },
      { key: 'bindings', label: 'Bindings', sort: true, num: true },
    ],
    actions: (row, t) => (row.name.startsWith('amq.') || !row.name ? [] : [
      actionButton('Delete', () => api.del(`/amqp/exchanges/${seg(row.vhost)}/${seg(row.name)}`), {
        notice, danger: true, typed: row.name, confirm: `Delete exchange ${row.name} (vhost ${row.vhost}) and its bindings?`,
        done: `Exchange ${row.name} deleted.`, after: () => t.reload(),
      })]),
  });
  const bindings = new PagedTable({
    path: '/amqp/bindings', filterLabel: 'Filter bindings by source', sort: 'source',
    columns: [
      { key: 'vhost', label: 'Vhost', sort: true },
      { key: 'source', label: 'From exchange', sort: true },
      { key: 'destination', label: 'To', sort: true, render: (r) => `${r.destination_type} ${r.destination}` },
      { key: 'routing_key', label: 'Routing key', sort: true },
    ],
  });
  container.append(heading('AMQP'), notice.node, h('h3', {}, 'Queues'), queues.node,
    h('h3', {}, 'Exchanges'), exchanges.node, h('h3', {}, 'Bindings'), bindings.node);
  queues.load();
  exchanges.load();
  bindings.load();
}

// -- users and ACLs ------------------------------------------------------------------

function users(container, args) {
  if (args[0]) return user(container, args[0]);
  const notice = new Notice();
  const table = new PagedTable({
    path: '/users', filterLabel: 'Filter users', sort: 'name',
    columns: [
      { key: 'name', label: 'User', sort: true, render: (r) => link(`#/users/${encodeURIComponent(r.name)}`, r.name) },
      { key: 'tags', label: 'Tags', render: (r) => (r.tags || []).join(', ') },
      { key: 'password', label: 'Password', render: (r) => (r.password ? 'yes' : 'no') },
      { key: 'acl_rules', label: 'ACL rules', num: true },
      { key: 'vhosts', label: 'AMQP vhosts', render: (r) => (r.vhosts || []).join(', ') },
      { key: 'access_keys', label: 'Access keys', render: (r) => (r.access_keys || []).join(', ') },
    ],
    actions: (row, t) => [actionButton('Delete', () => api.del(`/users/${seg(row.name)}`), {
      notice, danger: true, typed: row.name, confirm: `Delete user ${row.name}? It can no longer log in.`,
      done: `User ${row.name} deleted.`, after: () => t.reload(),
    })],
  });
  const add = form({
    title: 'Add a user', submitLabel: 'Add', notice,
    fields: [
      { name: 'name', label: 'Name', required: true },
      { name: 'password', label: 'Password', type: 'password', required: true },
      { name: 'tags', label: 'Tags (comma separated)', placeholder: 'administrator' },
    ],
    submit: async (v) => {
      const exists = await api.get(`/users/${seg(v.name)}`).then(() => true, (err) => {
        if (err.status === 404) return false;
        throw err;
      });
      if (exists) throw new Error(`user ${v.name} exists already`);
      const tags = v.tags.split(',').map((t) => t.trim()).filter(Boolean);
      await api.put(`/users/${seg(v.name)}`, { password: v.password, tags });
      table.restart();
      return `User ${v.name} added.`;
    },
  });
  // AMQP vhosts of the users file (a few: not paged), with the users permitted on them.
  const vhostBody = h('tbody');
  async function loadVhosts() {
    let doc;
    try {
      doc = await api.get('/vhosts');
    } catch (err) { notice.fail(err.message); return; }
    const rows = doc.items.map((v) => h('tr', {},
      h('td', {}, v.name), h('td', {}, v.description || ''), h('td', {}, (v.users || []).join(', ')),
      h('td', { class: 'actions' }, v.name === '/' ? '' : actionButton('Delete', () => api.del(`/vhosts/${seg(v.name)}`), {
        notice, danger: true, typed: v.name,
        confirm: `Delete vhost ${v.name} and every user's permissions on it? AMQP clients can no longer open it.`,
        done: `Vhost ${v.name} deleted.`, after: loadVhosts,
      }))));
    vhostBody.replaceChildren(...(rows.length ? rows
      : [h('tr', {}, h('td', { colspan: 4, class: 'none' }, 'none'))]));
  }
  const addVhost = form({
    title: 'Add a vhost', submitLabel: 'Add vhost', notice,
    fields: [
      { name: 'vhost', label: 'Vhost', required: true, placeholder: 'staging' },
      { name: 'description', label: 'Description' },
    ],
    submit: async (v) => {
      await api.put(`/vhosts/${seg(v.vhost)}`, { description: v.description });
      await loadVhosts();
      return `Vhost ${v.vhost} added.`;
    },
  });
  container.append(heading('Users and ACLs'), notice.node, add, table.node,
    h('h3', {}, 'AMQP vhosts'), addVhost,
    h('div', { class: 'scroll' }, h('table', { class: 'vhosts' },
      h('thead', {}, h('tr', {}, ['Vhost', 'Description', 'Users permitted', ''].map((t) => h('th', {}, t)))),
      vhostBody)));
  table.load();
  loadVhosts();
  return null;
}

function user(container, name) {
  const notice = new Notice();
  const body = h('div');
  const base = `/users/${seg(name)}`;
  async function load() {
    let doc;
    try {
      doc = await api.get(base);
    } catch (err) { notice.fail(err.message); return; }
    const rules = (doc.acl || []).map((rule, i) => h('tr', {},
      h('td', { class: 'num' }, String(i + 1)), h('td', {}, h('code', {}, rule)),
      h('td', { class: 'actions' }, actionButton('Remove', () => api.del(`${base}/acl/${i + 1}`), {
        notice, danger: true, confirm: `Remove rule ${i + 1} (${rule}) of ${name}?`,
        done: `Rule ${i + 1} removed.`, after: load,
      }))));
    const perms = Object.entries(doc.permissions || {}).map(([vhost, p]) => h('tr', {},
      h('td', {}, vhost), h('td', {}, h('code', {}, p.configure)), h('td', {}, h('code', {}, p.write)),
      h('td', {}, h('code', {}, p.read)),
      h('td', { class: 'actions' }, actionButton('Clear', () => api.del(`${base}/permissions/${seg(vhost)}`), {
        notice, danger: true, confirm: `Clear ${name}'s permissions on vhost ${vhost}?`, done: 'Permissions cleared.', after: load,
      }))));
    const keys = (doc.access_keys || []).map((key) => h('tr', {}, h('td', {}, h('code', {}, key)),
      h('td', { class: 'actions' }, actionButton('Delete', () => api.del(`/access-keys/${seg(key)}`), {
        notice, danger: true, confirm: `Delete access key ${key}? Clients signing with it are refused.`,
        done: `Access key ${key} deleted.`, after: load,
      }))));
    const certs = (doc.certificate_subjects || []).map((subject) => h('tr', {}, h('td', {}, h('code', {}, subject)),
      h('td', { class: 'actions' }, actionButton('Unmap', () => api.del(`/certificates/${seg(subject)}`), {
        notice, danger: true, confirm: `Unmap certificate subject ${subject}? A client presenting it no longer logs in as ${name}.`,
        done: `Certificate subject ${subject} unmapped.`, after: load,
      }))));
    const none = (n) => h('tr', {}, h('td', { colspan: n, class: 'none' }, 'none'));
    body.replaceChildren(
      h('p', { class: 'summary' }, `Tags: ${(doc.tags || []).join(', ') || 'none'} \u00b7 password: ${doc.password ? 'yes' : 'no'}`
        + ` \u00b7 certificate subjects: ${(doc.certificate_subjects || []).join('; ') || 'none'}`),
      h('h3', {}, 'ACL rules (first match decides)'),
      h('div', { class: 'scroll' }, h('table', { class: 'acl' },
        h('thead', {}, h('tr', {}, h('th', { class: 'num' }, '#'), h('th', {}, 'Rule'), h('th', {}, ''))),
        h('tbody', {}, rules.length ? rules : none(3)))),
      h('h3', {}, 'AMQP permissions'),
      h('div', { class: 'scroll' }, h('table', {},
        h('thead', {}, h('tr', {}, ['Vhost', 'Configure', 'Write', 'Read', ''].map((t) => h('th', {}, t)))),
        h('tbody', {}, perms.length ? perms : none(5)))),
      h('h3', {}, 'Access keys'),
      h('div', { class: 'scroll' }, h('table', {},
        h('thead', {}, h('tr', {}, h('th', {}, 'Access key'), h('th', {}, ''))),
        h('tbody', {}, keys.length ? keys : none(2)))),
      h('h3', {}, 'Client certificates'),
      h('div', { class: 'scroll' }, h('table', { class: 'certificates' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Certificate subject'), h('th', {}, ''))),
        h('tbody', {}, certs.length ? certs : none(2)))));
  }
  const cert = form({
    title: 'Map a client certificate', submitLabel: 'Map', notice,
    fields: [{ name: 'subject', label: 'Certificate subject', required: true, placeholder: 'CN=dev-1,O=Acme' }],
    submit: async (v) => {
      const doc = await api.post(`${base}/certificates`, { subject: v.subject });
      await load();
      return `Certificate subject ${doc.subject} mapped to ${name}.`;
    },
  });
  const rule = form({
    title: 'Add an ACL rule', submitLabel: 'Add rule', notice,
    fields: [
      { name: 'access', label: 'Access', options: ['publish', 'subscribe', 'both', 'deny'], value: 'both' },
      { name: 'filter', label: 'Topic filter', required: true, placeholder: 'orders/#' },
      { name: 'position', label: 'Position (empty: last)', type: 'number', min: 1 },
    ],
    submit: async (v) => {
      const doc = await api.post(`${base}/acl`, {
        access: v.access, filter: v.filter, position: v.position === '' ? undefined : Number(v.position),
      });
      await load();
      return `Rule added: ${doc.rule}.`;
    },
  });
  const perms = form({
    title: 'Set AMQP permissions', submitLabel: 'Set', notice,
    fields: [
      { name: 'vhost', label: 'Vhost', required: true, value: '/' },
      { name: 'configure', label: 'Configure (regex)', value: '.*' },
      { name: 'write', label: 'Write (regex)', value: '.*' },
      { name: 'read', label: 'Read (regex)', value: '.*' },
    ],
    submit: async (v) => {
      await api.put(`${base}/permissions/${seg(v.vhost)}`, { configure: v.configure, write: v.write, read: v.read });
      await load();
      return `Permissions on ${v.vhost} set.`;
    },
  });
  const change = form({
    title: 'Change password or tags', submitLabel: 'Change', notice,
    fields: [
      { name: 'password', label: 'New password (empty: unchanged)', type: 'password' },
      { name: 'tags', label: 'Tags (comma separated; empty: unchanged)' },
    ],
    submit: async (v) => {
      const change = {};
      if (v.password) change.password = v.password;
      if (v.tags.trim()) change.tags = v.tags.split(',').map((t) => t.trim()).filter(Boolean);
      if (!Object.keys(change).length) throw new Error('give a new password or tags');
      await api.put(base, change);
      await load();
      return `User ${name} changed.`;
    },
  });
  const key = actionButton('Add an access key', () => api.post(`${base}/access-keys`, {}), {
    notice, after: load,
    done: (doc) => `Access key ${doc.access_key}, secret key ${doc.secret_key} (shown this once: keep it now).`,
  });
  container.append(heading(`User ${name}`, link('#/users', '\u2190 all users')), notice.node, body,
    h('div', { class: 'forms' }, rule, perms, change, cert), h('p', {}, key));
  load();
  return null;
}

// -- connector -------------------------------------------------------------------------

function connectors(container) {
  const notice = new Notice();
  const table = new PagedTable({
    path: '/connector/rules', filterLabel: null, // one row per rule of the file: not paged
    columns: [
      { key: 'rule', label: 'Rule' },
      { key: 'route', label: 'Copies', render: (r) => `${r.source} \u2192 ${r.target}` },
      { key: 'state', label: 'State' },
      { key: 'lag', label: 'Lag', num: true },
      { key: 'delay_ms', label: 'Delay (ms)', num: true },
      { key: 'messages_per_second', label: 'Msg/s', num: true },
      { key: 'messages', label: 'Copied', num: true },
      { key: 'errors', label: 'Errors', num: true },
      { key: 'last_error', label: 'Last error' },
    ],
    // "stopped": disabled here (until enabled or a restart); "disabled": in the
    // connector's configuration, which the console does not change
    actions: (row, t) => (row.state === 'disabled' ? [] : [row.state === 'stopped'
      ? actionButton('Enable', () => api.post(`/connector/rules/${seg(row.rule)}/enable`), {
        notice, done: `Rule ${row.rule} enabled.`, after: () => t.reload(),
      })
      : actionButton('Disable', () => api.post(`/connector/rules/${seg(row.rule)}/disable`), {
        notice, danger: true, confirm: `Disable rule ${row.rule}? Copying stops after its batch in flight, until the rule is enabled again or the gateway restarts.`,
        done: `Rule ${row.rule} disabled.`, after: () => t.reload(),
      })]),
  });
  container.append(heading('Connector rules'), notice.node, table.node);
  table.load();
}

// -- message browser -----------------------------------------------------------------

function messageTable(items, peeked) {
  if (!items.length) return h('p', { class: 'none' }, 'no message found');
  const head = [peeked ? 'Offset' : 'Found by', 'Position', 'Topic', 'Tag', 'Keys', 'Message id', 'Stored', 'Size', 'Body'];
  return h('div', { class: 'scroll' }, h('table', { class: 'messages' },
    h('thead', {}, h('tr', {}, head.map((t) => h('th', {}, t)))),
    h('tbody', {}, items.map((m) => {
      const props = m.properties || {};
      return h('tr', {},
        h('td', { class: peeked ? 'num' : undefined }, peeked ? number(m.offset) : m.found_by),
        h('td', { class: 'num' }, number(m.position)), h('td', {}, m.topic || ''), h('td', {}, m.tag || ''),
        h('td', {}, props.KEYS || ''), h('td', {}, props.UNIQ_KEY || ''), h('td', {}, time(m.store_ms)),
        h('td', { class: 'num' }, bytes(m.body_bytes)),
        h('td', {}, h('code', {}, m.body ?? (m.body_base64 ? `base64: ${m.body_base64}` : ''))));
    }))));
}

function messages(container, args) {
  const notice = new Notice();
  const results = h('div', { class: 'results' });
  const show = (doc, peeked) => {
    const rows = messageTable(doc.items || [], peeked);
    const nodes = [rows];
    if (peeked) {
      nodes.unshift(h('p', { class: 'summary' },
        `${doc.lmq}: offsets ${number(doc.min_offset)} to ${number(doc.max_offset)} (read-only: nothing consumed)`));
      if (doc.next_offset !== undefined && doc.next_offset < doc.max_offset) {
        nodes.push(h('p', {}, h('button', { type: 'button', onclick: async () => {
          try { show(await api.get(`/lmqs/${seg(doc.lmq)}/messages`, { offset: doc.next_offset, limit: 20 }), true); }
          catch (err) { notice.fail(err.message); }
        } }, 'Next messages \u203a')));
      }
    }
    results.replaceChildren(...nodes);
  };
  const byId = form({
    title: 'Find by message id', submitLabel: 'Find', notice,
    fields: [{ name: 'id', label: 'Message id (UNIQ_KEY or offsetMsgId)', required: true }],
    submit: async (v) => { show(await api.get(`/messages/${seg(v.id)}`), false); return ''; },
  });
  const byKey = form({
    title: 'Find by key', submitLabel: 'Find', notice,
    fields: [{ name: 'topic', label: 'Topic', required: true }, { name: 'key', label: 'Key', required: true }],
    submit: async (v) => { show(await api.get('/messages', { topic: v.topic, key: v.key }), false); return ''; },
  });
  const peek = form({
    title: 'Peek (read-only: consumes nothing)', submitLabel: 'Peek', notice,
    fields: [
      { name: 'lmq', label: 'LMQ (rmq:TOPIC:QUEUE, mqtt:TOPIC...)', required: true, value: args[0] === 'lmq' ? args[1] : undefined },
      { name: 'offset', label: 'From offset (empty: the first)', type: 'number', min: 0 },
      { name: 'limit', label: 'Messages', type: 'number', value: '20', min: 1 },
    ],
    submit: async (v) => {
      show(await api.get(`/lmqs/${seg(v.lmq)}/messages`, { offset: v.offset, limit: v.limit }), true);
      return '';
    },
  });
  container.append(heading('Messages'), notice.node, h('div', { class: 'forms' }, byId, byKey, peek), results);
}

export const PAGES = [
  { id: 'overview', title: 'Overview', render: overview },
  { id: 'connections', title: 'Connections', render: connections },
  { id: 'sessions', title: 'Sessions', render: sessions },
  { id: 'topics', title: 'Topics', render: topics },
  { id: 'lmqs', title: 'LMQs', render: lmqs },
  { id: 'groups', title: 'Groups', render: groups },
  { id: 'amqp', title: 'AMQP', render: amqp },
  { id: 'users', title: 'Users', render: users },
  { id: 'connector', title: 'Connector', render: connectors },
  { id: 'messages', title: 'Messages', render: messages },
];
