'use strict';
// The real @aliyunmq/mq-http-sdk (unchanged) against the gateway's Aliyun MQ HTTP API,
// driven by tests/gateway/http/test_aliyun_node_sdk.py:
//
//   node aliyun_http_client.js SCENARIO '<json>'
//
// prints one line "LMQ <json>" with what it saw, and exits 0; any unexpected error exits 1
// with the error on stderr. JSON: {endpoint, ak, sk, instance, topic, group}.

const { MQClient, MessageProperties } = require('@aliyunmq/mq-http-sdk');

function out(obj) {
  process.stdout.write('LMQ ' + JSON.stringify(obj) + '\n');
}

async function drain(consumer, want, orderly) {
  const got = [];
  const deadline = Date.now() + 15000;
  while (got.length < want && Date.now() < deadline) {
    try {
      const res = orderly
        ? await consumer.consumeMessageOrderly(16, 1)
        : await consumer.consumeMessage(16, 1);
      for (const m of res.body) got.push(m);
      if (orderly) await consumer.ackMessage(res.body.map(m => m.ReceiptHandle));
    } catch (e) {
      if (e.Code !== 'MessageNotExist') throw e;
    }
  }
  return got;
}

async function emptyCode(consumer) {
  try {
    await consumer.consumeMessage(1, 1);
    return 'messages';
  } catch (e) {
    return e.Code;
  }
}

const scenarios = {
  async basic(cfg, client) {
    const producer = client.getProducer(cfg.instance, cfg.topic);
    const ids = [];
    for (let i = 0; i < 3; i++) {
      const props = new MessageProperties();
      props.messageKey('key-' + i);
      props.putProperty('color', 'blue');
      const res = await producer.publishMessage('node-' + i, 'tagN', props);
      ids.push(res.body.MessageId);
    }
    const consumer = client.getConsumer(cfg.instance, cfg.topic, cfg.group, 'tagN');
    const got = await drain(consumer, 3, false);
    const ack = await consumer.ackMessage(got.map(m => m.ReceiptHandle));
    const again = await consumer.ackMessage([got[0].ReceiptHandle]);
    out({
      sent: ids,
      got: got.map(m => ({ id: m.MessageId, body: m.MessageBody, tag: m.MessageTag,
        key: m.MessageKey, props: m.Properties, times: m.ConsumedTimes })),
      ackCode: ack.code,
      againCode: again.code,
      againErrors: again.body,
      empty: await emptyCode(consumer),
      requestId: ack.requestId,
    });
  },

  async order(cfg, client) {
    const producer = client.getProducer(cfg.instance, cfg.topic);
    for (let i = 0; i < 6; i++) {
      const props = new MessageProperties();
      props.shardingKey('k' + (i % 2));
      await producer.publishMessage(`${i % 2}-${i}`, '', props);
    }
    const consumer = client.getConsumer(cfg.instance, cfg.topic, cfg.group);
    const got = await drain(consumer, 6, true);
    out({ got: got.map(m => ({ body: m.MessageBody, key: m.ShardingKey })) });
  },

  async delay(cfg, client) {
    const at = Date.now() + 1500;
    const props = new MessageProperties();
    props.startDeliverTime(at);
    await client.getProducer(cfg.instance, cfg.topic).publishMessage('later', '', props);
    const consumer = client.getConsumer(cfg.instance, cfg.topic, cfg.group);
    const got = await drain(consumer, 1, false);
    out({ at, got: got.map(m => ({ body: m.MessageBody, first: Number(m.FirstConsumeTime) })) });
  },

  async trans(cfg, client) {
    const producer = client.getTransProducer(cfg.instance, cfg.topic, cfg.group + '_P');
    const consumer = client.getConsumer(cfg.instance, cfg.topic, cfg.group);
    await emptyCode(consumer);
    const half = async (body) => {
      const props = new MessageProperties();
      props.transCheckImmunityTime(1);
      return (await producer.publishMessage(body, '', props)).body.ReceiptHandle;
    };
    const commitHandle = await half('commit-me');
    const rollbackHandle = await half('roll-me-back');
    const commit = await producer.commit(commitHandle);
    const rollback = await producer.rollback(rollbackHandle);
    const got = await drain(consumer, 1, false);
    await consumer.ackMessage(got.map(m => m.ReceiptHandle));
    await half('decide-later');
    let polled = [];
    const deadline = Date.now() + 15000;
    while (polled.length === 0 && Date.now() < deadline) {
      try {
        polled = (await producer.consumeHalfMessage(1, 3)).body;
      } catch (e) {
        if (e.Code !== 'MessageNotExist') throw e;
      }
    }
    await producer.commit(polled[0].ReceiptHandle);
    const later = await drain(consumer, 1, false);
    out({
      commitCode: commit.code, rollbackCode: rollback.code,
      got: got.map(m => m.MessageBody), polled: polled.map(m => m.MessageBody),
      later: later.map(m => m.MessageBody),
    });
  },

  async badsign(cfg, client) {
    try {
      await client.getProducer(cfg.instance, cfg.topic).publishMessage('x', '');
      out({ code: 'published' });
    } catch (e) {
      out({ code: e.Code });
    }
  },
};

async function main() {
  const [scenario, json] = process.argv.slice(2);
  const cfg = JSON.parse(json);
  const client = new MQClient(cfg.endpoint, cfg.ak, cfg.sk);
  await scenarios[scenario](cfg, client);
}

main().then(() => process.exit(0), (err) => {
  console.error(err && err.stack ? err.stack : err);
  process.exit(1);
});
