#!/usr/bin/env bash
# Runs a standalone ZooKeeper from Debian's package as a plain background process on 127.0.0.1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/_common.sh"

[ $# -eq 2 ] || usage
action=$1; dir=$(mkdir -p "$2" && cd "$2" && pwd)

ruok() {
    # Bounded: a probe accepted while the server is still starting may never be answered.
    local reply
    reply=$(timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf ruok >&3 && cat <&3' _ "$1")
    [ "$reply" = imok ]
}

start() {
    local port; port=$(state_port "$dir" zookeeper)
    mkdir -p "$dir/conf" "$dir/data"
    # tickTime 500 ms lets tests use sessions as short as 1 s (ZooKeeper's floor is 2 ticks).
    cat > "$dir/conf/zoo.cfg" <<CFG
tickTime=500
minSessionTimeout=1000
maxSessionTimeout=60000
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr
CFG
    cat > "$dir/conf/log4j.properties" <<'LOG'
log4j.rootLogger=WARN, FILE
log4j.appender.FILE=org.apache.log4j.FileAppender
log4j.appender.FILE.File=${zookeeper.log.file}
log4j.appender.FILE.layout=org.apache.log4j.PatternLayout
log4j.appender.FILE.layout.ConversionPattern=%d %p [%t] %c: %m%n
LOG
    local classpath="$dir/conf"
    for jar in zookeeper zookeeper-jute slf4j-api slf4j-log4j12 log4j-1.2 netty-handler netty-common \
               netty-buffer netty-transport netty-resolver netty-codec netty-transport-native-epoll \
               netty-transport-native-unix-common metrics-core snappy-java commons-cli commons-io; do
        [ -f "/usr/share/java/$jar.jar" ] && classpath="$classpath:/usr/share/java/$jar.jar"
    done
    nohup java -Xmx256m -Dzookeeper.log.file="$dir/zookeeper.log" -cp "$classpath" \
        org.apache.zookeeper.server.ZooKeeperServerMain "$dir/conf/zoo.cfg" \
        > "$dir/stdout.log" 2>&1 < /dev/null &
    echo $! > "$dir/pid"
    await_ready "$dir" "zookeeper on 127.0.0.1:$port (ruok)" "$dir/stdout.log" ruok "$port"
    echo "127.0.0.1:$port"
}

dispatch "$action" "$dir"
