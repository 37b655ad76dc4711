#!/usr/bin/env bash
# Usage: scripts/build.sh OUT GOOS GOARCH
# A static nodeid-init for GOOS/GOARCH at OUT: no cgo (runs in an empty
# image), -trimpath (no build paths in the binary), main.version and
# main.commit from VERSION and COMMIT, else from git.
set -euo pipefail
if [ $# -ne 3 ]; then
	echo "usage: scripts/build.sh OUT GOOS GOARCH" >&2
	exit 2
fi
out=$1 goos=$2 goarch=$3
case $out in /*) ;; *) out=$PWD/$out ;; esac # OUT is relative to the caller
cd "$(dirname "$0")/.."
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
commit=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
mkdir -p "$(dirname "$out")"
CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch ${GO:-go} build -trimpath \
	-ldflags "-X main.version=$version -X main.commit=$commit" \
	-o "$out" ./cmd/nodeid-init
