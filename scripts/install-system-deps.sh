#!/usr/bin/env bash
# System packages the test suite needs: Debian's mosquitto-clients (mosquitto_pub/sub as
# real MQTT peers), mosquitto and rabbitmq-server (the connector's peer brokers), a Java runtime for the local Spark tests, openssl for test
# certificates and Node.js with npm (the real RocketMQ client ali-ons, installed from
# tests/node/package-lock.json by scripts/install-node-deps.sh), and Chromium (the web
# console's browser tests drive it with Playwright; Playwright's own browser download is
# not used). Installs only what is
# missing, so it is cheap to call before every test run.
set -euo pipefail
need=()
command -v mosquitto_pub >/dev/null 2>&1 || need+=(mosquitto-clients)
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
command -v openssl >/dev/null 2>&1 || need+=(openssl)  # test certificates for TLS tests
command -v node >/dev/null 2>&1 || need+=(nodejs)  # ali-ons, tests/gateway/remoting
command -v npm >/dev/null 2>&1 || need+=(npm)
command -v curl >/dev/null 2>&1 || need+=(curl)  # the JSON API's tests (tests/gateway/http)
# the connector's real peers (tests/gateway/connector/test_peers_*.py): Debian's brokers,
# started by the tests on loopback ports (their packaged services are not used)
[ -x /usr/sbin/mosquitto ] || command -v mosquitto >/dev/null 2>&1 || need+=(mosquitto)
[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || need+=(rabbitmq-server)
# the web console's browser tests (tests/gateway/console): Playwright drives Debian's Chromium
[ -x /usr/bin/chromium ] || need+=(chromium)
((${#need[@]})) || exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "missing system packages: ${need[*]} (no apt-get here: install them by hand)" >&2
  exit 1
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
