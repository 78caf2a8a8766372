'use strict';
// The official RocketMQ 5 gRPC client for Node (npm rocketmq-client-nodejs), unchanged,
// driven by the gRPC client tests (tests/gateway/grpc_clients/clients.py, NodeClient).
//
//   node grpc_client.js producer|simple '<json config>'
//
// Prints `LMQ {"ready":true}` once startup() resolved (`{"fatal":...}` if it rejected),
// then reads one JSON command a line from stdin and prints one
// `{"reply":id,"ok":...}` or `{"reply":id,"error":...}` line for each:
//   {"op":"send","message":{topic,body,tag,keys,properties,group}}
//   {"op":"receive","max":n,"invisible":seconds}   (the client takes milliseconds)
//   {"op":"ack","msg":messageId}, {"op":"change","msg":messageId,"invisible":seconds}
// SIGTERM shuts the client down (`{"closed":true}`). The client's own logging goes to
// stderr (a logger passed in options), never to a file in the home directory.

const readline = require('node:readline');
const { Producer, SimpleConsumer, FilterExpression } = require('rocketmq-client-nodejs');

function out(obj) {
  process.stdout.write('LMQ ' + JSON.stringify(obj) + '\n');
}

const logger = {
  info() {},
  debug() {},
  warn(...args) { console.error('[warn]', ...args); },
  error(...args) { console.error('[error]', ...args); },
};

function view(m) {
  return {
    id: m.messageId,
    topic: m.topic,
    body: m.body.toString('utf8'),
    size: m.body.length,
    tag: m.tag ?? null,
    keys: [...(m.keys || [])].sort(),
    properties: Object.fromEntries(m.properties),
    group: m.messageGroup ?? null,
    attempt: m.deliveryAttempt ?? null,
    receipt: m.receiptHandle,
    corrupted: Boolean(m.corrupted),
  };
}

function options(cfg) {
  const o = { endpoints: cfg.endpoints, namespace: '', logger,
    requestTimeout: cfg.requestTimeout || 3000 };
  if (cfg.ak) o.sessionCredentials = { accessKey: cfg.ak, accessSecret: cfg.sk };
  return o;
}

async function main() {
  const [ role, raw ] = process.argv.slice(2);
  const cfg = JSON.parse(raw);
  let client;
  try {
    if (role === 'producer') {
      client = new Producer(Object.assign(options(cfg), { topics: cfg.topics || [] }));
    } else if (role === 'simple') {
      const subs = new Map();
      for (const [ topic, expr ] of Object.entries(cfg.subscriptions)) {
        subs.set(topic, new FilterExpression(expr));
      }
      client = new SimpleConsumer(Object.assign(options(cfg), {
        consumerGroup: cfg.group, subscriptions: subs,
        awaitDuration: (cfg.await_s || 5) * 1000,
      }));
    } else {
      throw new Error(`unknown role ${role}`);
    }
    await client.startup();
  } catch (err) {
    out({ fatal: String(err && err.stack || err) });
    process.exit(1);
  }
  out({ ready: true, clientId: client.clientId });

  let closing = false;
  async function close(code) {
    if (closing) return;
    closing = true;
    // the client's shutdown talks to the gateway: bounded
    setTimeout(() => process.exit(3), 15000).unref();
    try {
      await client.shutdown();
    } catch (err) {
      out({ shutdown_error: String(err) });
    }
    out({ closed: true });
    process.exit(code);
  }
  process.on('SIGTERM', () => close(0));

  const held = new Map(); // message id -> the last received copy
  const rl = readline.createInterface({ input: process.stdin });
  rl.on('line', async line => {
    if (!line.trim()) return;
    const cmd = JSON.parse(line);
    try {
      let result;
      if (cmd.op === 'send' && role === 'producer') {
        const m = cmd.message;
        const msg = { topic: m.topic, body: Buffer.from(m.body) };
        if (m.tag) msg.tag = m.tag;
        if (m.keys) msg.keys = m.keys;
        if (m.group) msg.messageGroup = m.group;
        if (m.properties) msg.properties = new Map(Object.entries(m.properties));
        const r = await client.send(msg);
        result = { id: r.messageId, offset: r.offset, queue: r.messageQueue.queueId };
      } else if (cmd.op === 'receive' && role === 'simple') {
        const got = await client.receive(cmd.max || 16, (cmd.invisible || 15) * 1000);
        for (const m of got) held.set(m.messageId, m);
        result = got.map(view);
      } else if (cmd.op === 'ack' && role === 'simple') {
        await client.ack(held.get(cmd.msg));
        result = true;
      } else if (cmd.op === 'change' && role === 'simple') {
        const m = held.get(cmd.msg);
        await client.changeInvisibleDuration(m, cmd.invisible * 1000);
        result = { receipt: m.receiptHandle };
      } else {
        throw new Error(`unknown command for ${role}: ${cmd.op}`);
      }
      out({ reply: cmd.id, ok: result });
    } catch (err) {
      out({ reply: cmd.id, error: String(err && err.message || err) });
    }
  });
  rl.on('close', () => close(0));
}

main();
