#!/bin/sh
# A ZooKeeper server under `nodeid-init run --data-root ROOT -- sh zookeeper-member.sh`
# (docs/recipes.md, tested by e2e/). The server's identity is its node ID:
# myid = $NODE_ID, the server.N line the fixed map gives that ID, and its
# data (version-2/: transaction logs and snapshots) in $NODE_DATA_DIR.
#
#   ZK_SERVERS    0=zk-0:2888:3888;2181,1=zk-1:2888:3888;2181,...  (every ID; the same in every task)
#   ZK_CONF_DIR   where zoo.cfg is written: the task's own disk, not the data directory
#   ZK_CLASSPATH  default /etc/zookeeper/conf:/usr/share/java/zookeeper.jar (Debian's zookeeper)
#   ZK_JVMFLAGS   e.g. -Xmx256m
set -eu
mine=$(echo "$ZK_SERVERS" | tr , '\n' | sed -n "s|^$NODE_ID=||p")
if [ -z "$mine" ]; then
	echo "zookeeper-member.sh: node $NODE_ID has no entry in ZK_SERVERS" >&2
	exit 2
fi
mkdir -p "$ZK_CONF_DIR"
# myid names the server; written on every start, it is the same for every
# tenure of the ID. An empty data directory (the ID's first tenure) is a new
# server; after a takeover the last version's version-2/ is there and the
# server rejoins from it.
# By rename: after a graceful stop the file is a hard link to the previous
# version's, which must not be written through.
echo "$NODE_ID" >"$NODE_DATA_DIR/myid.tmp"
mv "$NODE_DATA_DIR/myid.tmp" "$NODE_DATA_DIR/myid"
conf="$ZK_CONF_DIR/zoo.cfg"
{
	echo "# rendered by zookeeper-member.sh: node $NODE_ID version $NODE_VERSION"
	echo "tickTime=${ZK_TICK_TIME:-500}"
	echo "initLimit=20"
	echo "syncLimit=10"
	echo "dataDir=$NODE_DATA_DIR"
	echo "clientPort=${mine##*;}"
	echo "clientPortAddress=${mine%%:*}"
	echo "4lw.commands.whitelist=*"
	echo "admin.enableServer=false"
	echo "reconfigEnabled=false"
	echo "autopurge.purgeInterval=0"
	echo "$ZK_SERVERS" | tr , '\n' | sed 's/^/server./; s/;.*$//'
} >"$conf.tmp"
mv "$conf.tmp" "$conf"
echo "zookeeper-member.sh: myid $NODE_ID version $NODE_VERSION previous_graceful=$NODE_PREVIOUS_GRACEFUL" >&2
# exec: the JVM itself becomes run's command, so a lost lease SIGKILLs it at once.
# shellcheck disable=SC2086
exec java ${ZK_JVMFLAGS:-} -cp "${ZK_CLASSPATH:-/etc/zookeeper/conf:/usr/share/java/zookeeper.jar}" \
	org.apache.zookeeper.server.quorum.QuorumPeerMain "$conf"
