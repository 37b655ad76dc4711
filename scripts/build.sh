#!/usr/bin/env bash
# The one place nodeid-init's release flags live (make build, make release,
# the image build and cmd/nodeid-init/build_test.go all come here):
#   scripts/build.sh OUT [GOOS GOARCH]   static (CGO_ENABLED=0), -trimpath, stamped
#   scripts/build.sh --version           the version it would stamp
#   scripts/build.sh --commit            the commit it would stamp
# VERSION and COMMIT from the environment win; else the VERSION file at the
# root (one line, e.g. 0.1.0: no git tags needed) and the 12-char HEAD
# ("dev" without the file, "unknown" outside git).
set -euo pipefail
out=${1:-}
[[ -z "$out" || "$out" == /* || "$out" == -* ]] || out=$PWD/$out
cd "$(dirname "$0")/.."

: "${VERSION:=$(tr -d '[:space:]' 2>/dev/null < VERSION || true)}"
: "${VERSION:=dev}"
: "${COMMIT:=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}"

case "$out" in
--version) echo "$VERSION"; exit 0 ;;
--commit) echo "$COMMIT"; exit 0 ;;
"" | -*) echo "usage: scripts/build.sh OUT [GOOS GOARCH] | --version | --commit" >&2; exit 2 ;;
esac
if [[ "$VERSION$COMMIT" =~ [[:space:]\'\"] ]]; then
	echo "scripts/build.sh: VERSION and COMMIT must not contain spaces or quotes" >&2
	exit 2
fi

go=${GO:-go}
GOOS=${2:-$("$go" env GOOS)} GOARCH=${3:-$("$go" env GOARCH)} CGO_ENABLED=0 \
	"$go" build -trimpath -ldflags "-X main.version=$VERSION -X main.commit=$COMMIT" \
	-o "$out" ./cmd/nodeid-init
