#!/usr/bin/env bash
# Runs a Prometheus server from Debian's package as a plain background process on 127.0.0.1,
# scraping every second the targets listed in STATE_DIR/targets.json (Prometheus's file_sd
# format, re-read when it changes: a test writes its brokers' metrics addresses there).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/_common.sh"

[ $# -eq 2 ] || usage
action=$1; dir=$(mkdir -p "$2" && cd "$2" && pwd)

ready() {
    python3 -c 'import sys, urllib.request; urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/-/ready", timeout=2)' "$1"
}

start() {
    local port; port=$(state_port "$dir" prometheus)
    [ -f "$dir/targets.json" ] || echo '[]' > "$dir/targets.json"
    cat > "$dir/prometheus.yml" <<CFG
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: replog
    file_sd_configs:
      - files: ["$dir/targets.json"]
        refresh_interval: 1s
CFG
    nohup prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/data" \
        --web.listen-address="127.0.0.1:$port" --log.level=warn \
        > "$dir/prometheus.log" 2>&1 < /dev/null &
    echo $! > "$dir/pid"
    await_ready "$dir" "prometheus on 127.0.0.1:$port (/-/ready)" "$dir/prometheus.log" ready "$port"
    echo "127.0.0.1:$port"
}

dispatch "$action" "$dir"
