#!/usr/bin/env bash
# Runs a standalone ZooKeeper from Debian's package as a plain background process on 127.0.0.1.
#
# Secured when the caller has written STATE_DIR/secure/users before the first start: one
# "name password" a line, the users SASL DIGEST-MD5 signs in (a JAAS Server section made from
# it, only readable by its owner); STATE_DIR/secure/super-user, if present, names the one of
# them that ZooKeeper lets past every ACL (zookeeper.superUser). Clients without credentials
# still connect: the nodes' ACLs are what keeps them out.
#
# Over TLS only when STATE_DIR/secure/server.pem is there too: the server's PKCS#8 key and its
# certificate chain, with ca.pem, the CA a client's certificate must chain to (every client
# must show one), and client.pem, a client certificate and its key for this script's probe.
# The port is then ZooKeeper's secureClientPort, served by its Netty connection factory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/_common.sh"

[ $# -eq 2 ] || usage
action=$1; dir=$(mkdir -p "$2" && cd "$2" && pwd)

ruok() {
    # Bounded: a probe accepted while the server is still starting may never be answered.
    local reply
    if [ -f "$dir/secure/server.pem" ]; then
        reply=$(printf ruok | timeout 2 openssl s_client -quiet -ign_eof -connect "127.0.0.1:$1" \
            -CAfile "$dir/secure/ca.pem" -cert "$dir/secure/client.pem" -key "$dir/secure/client.pem" 2>/dev/null)
    else
        reply=$(timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf ruok >&3 && cat <&3' _ "$1")
    fi
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
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr
CFG
    if [ -f "$dir/secure/server.pem" ]; then
        cat >> "$dir/conf/zoo.cfg" <<CFG
secureClientPort=$port
secureClientPortAddress=127.0.0.1
serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory
ssl.keyStore.location=$dir/secure/server.pem
ssl.keyStore.type=PEM
ssl.trustStore.location=$dir/secure/ca.pem
ssl.trustStore.type=PEM
ssl.clientAuth=need
CFG
    else
        printf 'clientPort=%s\nclientPortAddress=127.0.0.1\n' "$port" >> "$dir/conf/zoo.cfg"
    fi
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
