#!/usr/bin/env bash
# Compares datadir.Prepare of two revisions on the local disk, in one run:
# the test binary of BASE (a git revision, default main) against this work
# tree's, interleaved, link and copy mode, median of RUNS.
#   bash scripts/bench-datadir-ab.sh [BASE]
# Environment: AB_FILES (default 10000), AB_KB per file (default 4),
# AB_RUNS (default 5), AB_TMP (default /var/tmp).
set -euo pipefail
baserev=${1:-main}
files=${AB_FILES:-10000}
kb=${AB_KB:-4}
runs=${AB_RUNS:-5}
cd "$(dirname "$0")/.."
base=$(mktemp -d "${AB_TMP:-/var/tmp}/bench-datadir-ab.XXXXXX")
trap 'rm -rf "$base"' EXIT
mkdir "$base/src-base" "$base/grave"
git archive "$baserev" | tar -x -C "$base/src-base"
(cd "$base/src-base" && go test -c -o "$base/base.test" ./datadir/)
go test -c -o "$base/new.test" ./datadir/
root="$base/root"
mkdir "$root"
now() { date +%s%N; }
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
secs() { awk -v ns="$1" 'BEGIN {printf "%.3f", ns / 1e9}'; }
prep() { # BIN MODE NAME: ns of one Prepare of node-0/v1
	local out
	sync
	out=$(cd "$base" && DATADIR_BENCH_ROOT=$root DATADIR_BENCH_FILES=$files DATADIR_BENCH_BYTES=$((files * kb * 1024)) \
		DATADIR_BENCH_MODE=$2 "$1" -test.run '^$' -test.bench '^BenchmarkPrepare$' -test.benchtime 1x)
	awk '/^BenchmarkPrepare/ {print $3}' <<<"$out"
	mv "$root/node-0/v1" "$base/grave/$3" # deleted at the end: ext4 slows after mass deletes
}
prep "$base/new.test" copy warmup >/dev/null
declare -A t
for ((i = 1; i <= runs; i++)); do
	for m in link copy; do
		for b in base new; do
			t[$b-$m]+="$(prep "$base/$b.test" $m "$b-$m-$i") "
		done
	done
	echo "run $i: $(for k in base-link new-link base-copy new-copy; do printf '%s %ss  ' "$k" "$(secs "$(tr ' ' '\n' <<<"${t[$k]}" | grep . | tail -1)")"; done)" >&2
done
echo
echo "Local disk, $files files of $kb KiB, median of $runs, seconds; base = $baserev ($(git rev-parse --short "$baserev")), new = work tree; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| mode | base | new | new/base |"
echo "|------|------|-----|----------|"
for m in link copy; do
	b=$(tr ' ' '\n' <<<"${t[base-$m]}" | grep . | median)
	n=$(tr ' ' '\n' <<<"${t[new-$m]}" | grep . | median)
	echo "| $m | $(secs "$b") | $(secs "$n") | $(awk -v a="$n" -v b="$b" 'BEGIN {printf "%.2f", a / b}')x |"
done
