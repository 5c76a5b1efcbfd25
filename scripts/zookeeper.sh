#!/usr/bin/env bash
# Runs a standalone ZooKeeper from Debian's package as a plain background process on 127.0.0.1.
#
# Secured when the caller has written STATE_DIR/secure/users before the first start: one
# "name password" a line, the users SASL DIGEST-MD5 signs in (a JAAS Server section made from
# it, only readable by its owner); STATE_DIR/secure/super-user, if present, names the one of
# them that ZooKeeper lets past every ACL (zookeeper.superUser). Clients without credentials
# still connect: the nodes' ACLs are what keeps them out.
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
    local java_options=()
    if [ -f "$dir/secure/users" ]; then
        echo "authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider" >> "$dir/conf/zoo.cfg"
        (
            umask 077
            echo "Server {"
            echo "    org.apache.zookeeper.server.auth.DigestLoginModule required"
            while read -r name password; do
                [ -n "$name" ] && printf '    user_%s="%s"\n' "$name" "$password"
            done < "$dir/secure/users"
            echo "    ;"
            echo "};"
        ) > "$dir/conf/jaas.conf"
        java_options+=("-Djava.security.auth.login.config=$dir/conf/jaas.conf")
        if [ -s "$dir/secure/super-user" ]; then
            java_options+=("-Dzookeeper.superUser=$(cat "$dir/secure/super-user")")
        fi
    fi
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
    nohup java -Xmx256m -Dzookeeper.log.file="$dir/zookeeper.log" ${java_options[@]+"${java_options[@]}"} -cp "$classpath" \
        org.apache.zookeeper.server.ZooKeeperServerMain "$dir/conf/zoo.cfg" \
        > "$dir/stdout.log" 2>&1 < /dev/null &
    echo $! > "$dir/pid"
    await_ready "$dir" "zookeeper on 127.0.0.1:$port (ruok)" "$dir/stdout.log" ruok "$port"
    echo "127.0.0.1:$port"
}

dispatch "$action" "$dir"
