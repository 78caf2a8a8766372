'use strict';
// A real ali-ons producer or push consumer, driven by tests/gateway/remoting/test_ali_ons.py.
//
//   node ons_client.js produce '<json>'   sends messages, prints one result line each, exits
//   node ons_client.js consume '<json>'   subscribes, prints one line per consumed message
//                                         until SIGTERM, then closes the consumer (which
//                                         commits its offsets and unregisters) and exits
//
// Every line meant for the test starts with "LMQ " and carries one JSON object; ali-ons'
// own warnings go to stderr. The options are ali-ons' own (nameSrv 'host:port' names the
// gateway as the name server); nothing in the client is patched.

const httpclient = require('urllib');
const { Producer, Consumer, Message } = require('ali-ons');

function out(obj) {
  process.stdout.write('LMQ ' + JSON.stringify(obj) + '\n');
}

const logger = {
  info() {},
  debug() {},
  warn(...args) { console.error('[warn]', ...args); },
  error(...args) { console.error('[error]', ...args); },
};

function common(cfg) {
  const options = { httpclient, logger, nameSrv: cfg.nameSrv };
  if (cfg.accessKeyId) {
    options.accessKeyId = cfg.accessKeyId;
    options.accessKeySecret = cfg.accessKeySecret;
  }
  return options;
}

async function produce(cfg) {
  const producer = new Producer(Object.assign(common(cfg), {
    producerGroup: cfg.group,
  }));
  producer.on('error', err => console.error('[producer error]', err.message));
  await producer.ready();
  for (const m of cfg.messages) {
    const msg = new Message(cfg.topic, m.tag || '', m.body);
    if (m.keys) msg.keys = m.keys;
    for (const [k, v] of Object.entries(m.properties || {})) msg.properties[k] = v;
    // ali-ons' own delay API: a delay level (DELAY) or Aliyun's absolute start time
    if (m.delayLevel) msg.delayTimeLevel = m.delayLevel;
    if (m.startDeliverTime) msg.setStartDeliverTime(m.startDeliverTime);
    try {
      const startedAt = Date.now();
      const r = await producer.send(msg);
      out({ sent: { body: m.body, msgId: r.msgId, status: r.sendStatus, startedAt,
        queueId: Number(r.messageQueue.queueId), queueOffset: Number(r.queueOffset) } });
    } catch (err) {
      out({ error: err.message, body: m.body });
    }
  }
  await producer.close();
  out({ closed: true });
}

async function consume(cfg) {
  const consumer = new Consumer(Object.assign(common(cfg), {
    consumerGroup: cfg.group,
    consumeFromWhere: cfg.consumeFromWhere || 'CONSUME_FROM_FIRST_OFFSET',
    persistConsumerOffsetInterval: cfg.persistInterval || 1000,
    rebalanceInterval: cfg.rebalanceInterval || 2000,
  }));
  consumer.on('error', err => console.error('[consumer error]', err.message));
  const failOnce = new Set(cfg.failOnce || []);
  consumer.subscribe(cfg.topic, cfg.expression || '*', async msg => {
    const body = msg.body.toString();
    const record = {
      msgId: msg.msgId, body, tags: msg.tags, keys: msg.keys, topic: msg.topic,
      queueId: msg.queueId, queueOffset: Number(msg.queueOffset),
      reconsumeTimes: msg.reconsumeTimes, properties: msg.properties,
      consumedAt: Date.now(),
    };
    if (failOnce.has(body)) {
      failOnce.delete(body);
      out({ failed: record });
      return Consumer.ACTION_RETRY;
    }
    out({ msg: record });
  });
  await consumer.ready();
  out({ ready: true, clientId: consumer.clientId });
  let closing = false;
  process.on('SIGTERM', async () => {
    if (closing) return;
    closing = true;
    try {
      await consumer.close();
      out({ closed: true });
    } finally {
      process.exit(0);
    }
  });
}

const [mode, json] = process.argv.slice(2);
const cfg = JSON.parse(json);
(mode === 'produce' ? produce(cfg) : consume(cfg)).catch(err => {
  out({ fatal: err.stack || String(err) });
  process.exit(2);
});
