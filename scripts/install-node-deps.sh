#!/usr/bin/env bash
# The npm packages of the test suite (tests/node: the real RocketMQ clients ali-ons and
# rocketmq-client-nodejs) from the committed lockfile, with `npm ci`. Make runs this only
# when package-lock.json is newer than the stamp. Offline-tolerant like the rest of
# `make test`: if npm cannot reach the registry but an earlier install is there, the tests
# run with it (and this runs again next time); with either client missing it fails, so
# the node tests never skip.
set -euo pipefail
cd "$(dirname "$0")/../tests/node"
stamp=node_modules/.installed
if npm ci --no-audit --no-fund --loglevel=error; then
  touch "$stamp"
  exit 0
fi
if [ -f node_modules/ali-ons/package.json ] \
  && [ -f node_modules/rocketmq-client-nodejs/package.json ] \
  && [ -f node_modules/@aliyunmq/mq-http-sdk/package.json ]; then
  echo "npm ci failed; using the node_modules already in tests/node" >&2
  exit 0
fi
echo "npm ci failed and tests/node/node_modules lacks a client: the node tests cannot run" >&2
exit 1
