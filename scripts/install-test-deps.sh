#!/usr/bin/env bash
# Installs what the test suite needs from Debian, if missing: ZooKeeper, etcd, kcat (a real
# Kafka client the client tests drive), a JDK and Maven (the Java client tests compile their
# driver with javac against Kafka's jars, which Maven resolves; the differential tests run
# Apache Kafka itself from them) and Prometheus (which scrapes brokers in the metrics test).
# A policy-rc.d that refuses every start keeps apt from launching them as system services:
# tests run their own instances on free 127.0.0.1 ports (scripts/zookeeper.sh, scripts/etcd.sh,
# scripts/prometheus.sh).
set -euo pipefail

needed=()
[ -f /usr/share/java/zookeeper.jar ] || needed+=(zookeeper)
command -v etcd >/dev/null 2>&1 || needed+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || needed+=(etcd-client)
command -v java >/dev/null 2>&1 || needed+=(default-jre-headless)
command -v javac >/dev/null 2>&1 || needed+=(default-jdk-headless)
command -v mvn >/dev/null 2>&1 || needed+=(maven)
command -v kcat >/dev/null 2>&1 || needed+=(kcat)
command -v prometheus >/dev/null 2>&1 || needed+=(prometheus)
[ ${#needed[@]} -eq 0 ] && exit 0

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | "${sudo_cmd[@]}" tee "$policy" >/dev/null
    "${sudo_cmd[@]}" chmod +x "$policy"
    trap '"${sudo_cmd[@]}" rm -f "$policy"' EXIT
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${needed[@]}"
