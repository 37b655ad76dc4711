#!/bin/sh
# An etcd member under `nodeid-init run --data-root ROOT -- sh etcd-member.sh`
# (docs/recipes.md, tested by e2e/). The member's identity is its node ID:
# name node-$NODE_ID, the peer and client URLs the fixed maps give that ID,
# and its data in $NODE_DATA_DIR, which nodeid carries from version to version.
#
#   CLUSTER_PEER_URLS    node-0=http://etcd-0:2380,node-1=...   (every ID; the same in every task)
#   CLUSTER_CLIENT_URLS  node-0=http://etcd-0:2379,node-1=...
#   ETCD_*               any other etcd setting, read by etcd itself, e.g.
#                        ETCD_INITIAL_CLUSTER_TOKEN, ETCD_LOGGER=zap, ETCD_LOG_LEVEL=warn
set -eu
name="node-$NODE_ID"
url() { echo "$1" | tr , '\n' | sed -n "s|^$name=||p"; }
peer=$(url "$CLUSTER_PEER_URLS")
client=$(url "$CLUSTER_CLIENT_URLS")
if [ -z "$peer" ] || [ -z "$client" ]; then
	echo "etcd-member.sh: $name has no URL in CLUSTER_PEER_URLS or CLUSTER_CLIENT_URLS" >&2
	exit 2
fi
# First tenure of this ID: an empty data directory, so the member joins the
# cluster being bootstrapped. After a takeover nodeid has prepared the last
# version's data (member/wal, member/snap): the member restarts from it, and
# etcd ignores the --initial-cluster* flags.
if [ -d "$NODE_DATA_DIR/member" ]; then state=existing; else state=new; fi
echo "etcd-member.sh: $name version $NODE_VERSION previous_graceful=$NODE_PREVIOUS_GRACEFUL initial-cluster-state=$state" >&2
# exec: etcd itself becomes run's command, so a lost lease SIGKILLs it at once.
exec etcd --name "$name" --data-dir "$NODE_DATA_DIR" \
	--listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
	--listen-client-urls "$client" --advertise-client-urls "$client" \
	--initial-cluster "$CLUSTER_PEER_URLS" --initial-cluster-state "$state"
