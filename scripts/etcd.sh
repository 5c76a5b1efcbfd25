#!/usr/bin/env bash
# Runs a single-member etcd from Debian's package as a plain background process on 127.0.0.1.
# Stock settings: replog must work on an etcd nobody reconfigured (128 operations per
# transaction, --max-txn-ops, above all).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/_common.sh"

[ $# -eq 2 ] || usage
action=$1; dir=$(mkdir -p "$2" && cd "$2" && pwd)

healthy() {
    ETCDCTL_API=3 etcdctl --endpoints "http://127.0.0.1:$1" --command-timeout=2s endpoint health
}

start() {
    local client_port peer_port
    client_port=$(state_port "$dir" etcd-client)
    peer_port=$(state_port "$dir" etcd-peer)
    nohup etcd --name replog-test --data-dir "$dir/data" \
        --listen-client-urls "http://127.0.0.1:$client_port" \
        --advertise-client-urls "http://127.0.0.1:$client_port" \
        --listen-peer-urls "http://127.0.0.1:$peer_port" \
        --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
        --initial-cluster "replog-test=http://127.0.0.1:$peer_port" \
        --logger zap --log-outputs "$dir/etcd.log" \
        > "$dir/stdout.log" 2>&1 < /dev/null &
    echo $! > "$dir/pid"
    await_ready "$dir" "etcd on 127.0.0.1:$client_port (endpoint health)" "$dir/etcd.log" healthy "$client_port"
    echo "127.0.0.1:$client_port"
}

dispatch "$action" "$dir"
