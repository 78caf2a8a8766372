#!/usr/bin/env bash
# System packages the test suite needs: Debian's mosquitto-clients (mosquitto_pub/sub as
# real MQTT peers), a Java runtime for the local Spark tests, openssl for test
# certificates and Node.js with npm (the real RocketMQ client ali-ons, installed from
# tests/node/package-lock.json by scripts/install-node-deps.sh). Installs only what is
# missing, so it is cheap to call before every test run.
set -euo pipefail
need=()
command -v mosquitto_pub >/dev/null 2>&1 || need+=(mosquitto-clients)
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
command -v openssl >/dev/null 2>&1 || need+=(openssl)  # test certificates for TLS tests
command -v node >/dev/null 2>&1 || need+=(nodejs)  # ali-ons, tests/gateway/remoting
command -v npm >/dev/null 2>&1 || need+=(npm)
command -v curl >/dev/null 2>&1 || need+=(curl)  # the JSON API's tests (tests/gateway/http)
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
