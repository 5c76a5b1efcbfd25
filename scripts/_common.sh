# Shared by zookeeper.sh and etcd.sh: free ports, pid files, bounded waits.

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# state_port DIR NAME: the port remembered in DIR/NAME.port, or a new free one (kept for restarts).
state_port() {
    local file="$1/$2.port"
    [ -s "$file" ] || free_port > "$file"
    cat "$file"
}

# wait_until SECONDS COMMAND...: poll COMMAND every 0.1 s until it succeeds or time runs out.
wait_until() {
    local deadline=$(( $(date +%s) + $1 )); shift
    until "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -lt "$deadline" ] || return 1
        sleep 0.1
    done
}

# stop_pid DIR: SIGTERM the recorded process, SIGKILL it if it lingers, forget it.
stop_pid() {
    local pidfile="$1/pid"
    [ -f "$pidfile" ] || return 0
    local pid; pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
        wait_until 15 bash -c "! kill -0 $pid" || kill -9 "$pid" 2>/dev/null || true
        wait_until 5 bash -c "! kill -0 $pid" || true
    fi
    rm -f "$pidfile"
}

usage() {
    echo "usage: $0 start|stop|restart STATE_DIR" >&2
    echo "  start: run a server on 127.0.0.1 with data in STATE_DIR; prints host:port" >&2
    echo "  stop: stop it (data kept); restart: stop, then start on the same port and data" >&2
    exit 2
}

# await_ready DIR WHAT LOG CHECK...: wait up to 60 s for CHECK; on failure show LOG, stop, exit 1.
await_ready() {
    local dir="$1" what="$2" log="$3"; shift 3
    if ! wait_until 60 "$@"; then
        echo "$what did not become ready; see $log" >&2
        tail -20 "$log" >&2 || true
        stop_pid "$dir"
        exit 1
    fi
}

# dispatch ACTION DIR: run `start` (a function of the calling script), stop or restart.
dispatch() {
    case "$1" in
        start) start ;;
        stop) stop_pid "$2" ;;
        restart) stop_pid "$2"; start ;;
        *) usage ;;
    esac
}
