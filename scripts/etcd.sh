#!/usr/bin/env bash
# Runs a single-member etcd from Debian's package as a plain background process on 127.0.0.1.
# Stock settings: replog must work on an etcd nobody reconfigured (128 operations per
# transaction, --max-txn-ops, above all).
#
# Secured when the caller has put in STATE_DIR/secure, before the first start: ca.pem, the CA
# clients' and the server's certificates chain to; server.crt and server.key, the server's
# (for 127.0.0.1); client.pem, a client certificate and its key in one file, for this script's
# etcdctl; users, one "name password" a line, root's first. The server then serves TLS only,
# asks every client for a certificate from that CA, and, at its first start, gets the users (the
# others with the role "replog": read and write on every key) and `auth enable`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/_common.sh"

[ $# -eq 2 ] || usage
action=$1; dir=$(mkdir -p "$2" && cd "$2" && pwd)
secure="$dir/secure"

etcdctl_() {
    local port=$1; shift
    if [ -f "$secure/users" ]; then
        ETCDCTL_API=3 etcdctl --endpoints "https://127.0.0.1:$port" --cacert "$secure/ca.pem" \
            --cert "$secure/client.pem" --key "$secure/client.pem" --command-timeout=2s "$@"
    else
        ETCDCTL_API=3 etcdctl --endpoints "http://127.0.0.1:$port" --command-timeout=2s "$@"
    fi
}

healthy() {
    etcdctl_ "$1" endpoint health
}

# enable_auth PORT: the users of secure/users, root first, then `auth enable`; once per data dir.
enable_auth() {
    local port=$1 name password root_password=""
    [ -f "$dir/data/auth-enabled" ] && return 0
    while read -r name password; do
        [ -n "$name" ] || continue
        etcdctl_ "$port" user add "$name" --new-user-password="$password" >/dev/null
        if [ "$name" = root ]; then
            root_password=$password
            etcdctl_ "$port" user grant-role root root >/dev/null
        else
            etcdctl_ "$port" role add replog >/dev/null 2>&1 || true
            etcdctl_ "$port" role grant-permission replog readwrite --from-key '' >/dev/null
            etcdctl_ "$port" user grant-role "$name" replog >/dev/null
        fi
    done < "$secure/users"
    [ -n "$root_password" ] || { echo "$secure/users names no root user" >&2; stop_pid "$dir"; exit 1; }
    etcdctl_ "$port" auth enable >/dev/null
    touch "$dir/data/auth-enabled"
}

start() {
    local client_port peer_port scheme=http tls=()
    client_port=$(state_port "$dir" etcd-client)
    peer_port=$(state_port "$dir" etcd-peer)
    if [ -f "$secure/users" ]; then
        scheme=https
        tls=(--cert-file "$secure/server.crt" --key-file "$secure/server.key" --client-cert-auth
             --trusted-ca-file "$secure/ca.pem")
    fi
    nohup etcd --name replog-test --data-dir "$dir/data" \
        --listen-client-urls "$scheme://127.0.0.1:$client_port" \
        --advertise-client-urls "$scheme://127.0.0.1:$client_port" \
        --listen-peer-urls "http://127.0.0.1:$peer_port" \
        --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
        --initial-cluster "replog-test=http://127.0.0.1:$peer_port" \
        ${tls[@]+"${tls[@]}"} \
        --logger zap --log-outputs "$dir/etcd.log" \
        > "$dir/stdout.log" 2>&1 < /dev/null &
    echo $! > "$dir/pid"
    await_ready "$dir" "etcd on 127.0.0.1:$client_port (endpoint health)" "$dir/etcd.log" healthy "$client_port"
    if [ -f "$secure/users" ]; then
        enable_auth "$client_port"
    fi
    echo "127.0.0.1:$client_port"
}

dispatch "$action" "$dir"
