#!/usr/bin/env bash
# Compares datadir.Prepare with `cp -a` on the same machine, in one run:
#   small: 10,000 files, BENCH_DATADIR_MB MiB in all (default 1024)
#   large: 16 files, twice that
# Prepare is measured in copy mode (ungraceful predecessor, nothing
# immutable: every file copied) and in link mode (graceful predecessor:
# every file hard-linked). Prepare's time includes validation, marker and
# the syncfs(2) that makes the copy durable before the marker. `cp -a` does
# not flush, so the copy is compared twice, like with like:
#   copy/cp        Prepare without the flush (test-only switch)  vs  cp -a
#   durable/cp+s   Prepare as shipped (with the flush)           vs  cp -a; sync
# The page cache is warm and dirty data is synced before every measurement;
# the five measurements of a run are interleaved.
#
# Environment:
#   BENCH_DATADIR_MB       size of the small set in MiB (default 1024; e.g. 64 for a quick run)
#   BENCH_DATADIR_RUNS     runs per measurement, the median is shown (default 3)
#   BENCH_DATADIR_WORKERS  datadir Options.Workers (default 0 = 1)
#   BENCH_DATADIR_TMP      where the data goes (default /var/tmp); removed afterwards
# Disk needed at the peak: about (1 + 4 x runs) x BENCH_DATADIR_MB MiB.
set -euo pipefail

mb=${BENCH_DATADIR_MB:-1024}
runs=${BENCH_DATADIR_RUNS:-3}
workers=${BENCH_DATADIR_WORKERS:-0}
tmp=${BENCH_DATADIR_TMP:-/var/tmp}

cd "$(dirname "$0")/.."
base=$(mktemp -d "$tmp/bench-datadir.XXXXXX")
trap 'rm -rf "$base"' EXIT
go test -c -o "$base/datadir.test" ./datadir/

now() { date +%s%N; }
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
secs() { awk -v ns="$1" 'BEGIN {printf "%.3f", ns / 1e9}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }

# Targets of the many-files set are moved to a graveyard and deleted only when
# the set is done: ext4 skips recently deleted inodes when it allocates new
# ones, and creating 10,000 files right after deleting 10,000 is several times
# slower (for cp as for Prepare); that would measure the deletion, not the
# copy. Targets of the few-files set are deleted at once instead: keeping
# them would fill the page cache, evict the source, and measure reading it
# back from disk.
grave="$base/graveyard"
keep_targets=1

# retire DIR NAME: gets a target out of the way of the next measurement.
retire() {
	if ((keep_targets)); then
		mv "$1" "$grave/$2"
	else
		rm -rf "$1"
	fi
	sync
}

# prepare ROOT FILES BYTES MODE NAME [noflush]: prints the duration of one
# Prepare of ROOT/node-0/v1 in ns.
prepare() {
	local out noflush=0
	[[ ${6:-} == noflush ]] && noflush=1
	sync
	out=$(cd "$base" && DATADIR_BENCH_ROOT=$1 DATADIR_BENCH_FILES=$2 DATADIR_BENCH_BYTES=$3 \
		DATADIR_BENCH_MODE=$4 DATADIR_BENCH_WORKERS=$workers DATADIR_BENCH_NOFLUSH=$noflush \
		./datadir.test -test.run '^$' -test.bench '^BenchmarkPrepare$' -test.benchtime 1x)
	awk '/^BenchmarkPrepare/ {print $3; found = 1} END {exit !found}' <<<"$out" || {
		echo "benchmark output not understood:" >&2
		echo "$out" >&2
		exit 1
	}
	retire "$1/node-0/v1" "$5"
}

# cpa SRC NAME [sync]: prints the duration of cp -a (and sync) in ns.
cpa() {
	local t0 t1
	sync
	t0=$(now)
	cp -a "$1" "$grave/$2"
	if [[ ${3:-} == sync ]]; then sync; fi
	t1=$(now)
	echo $((t1 - t0))
	if ((!keep_targets)); then
		rm -rf "$grave/$2"
		sync
	fi
}

fmt='| %-30s | %6s | %10s | %6s | %7s | %7s | %12s | %6s | %8s |\n'
rows=()
bench() { # NAME FILES BYTES
	local name=$1 files=$2 bytes=$3 root="$base/$1"
	local cp=() cps=() pn=() pc=() pl=() i
	keep_targets=$((files >= 1000))
	mkdir -p "$root" "$grave"
	echo "== $name: $files files, $((bytes >> 20)) MiB: generating and warming up" >&2
	prepare "$root" "$files" "$bytes" copy warmup >/dev/null
	for ((i = 1; i <= runs; i++)); do
		cp+=("$(cpa "$root/node-0/v0" "cp-$i")")
		cps+=("$(cpa "$root/node-0/v0" "cp-sync-$i" sync)")
		pn+=("$(prepare "$root" "$files" "$bytes" copy "noflush-$i" noflush)")
		pc+=("$(prepare "$root" "$files" "$bytes" copy "copy-$i")")
		pl+=("$(prepare "$root" "$files" "$bytes" link "link-$i")")
		echo "   run $i: cp -a $(secs "${cp[-1]}")s, cp -a; sync $(secs "${cps[-1]}")s," \
			"copy without flush $(secs "${pn[-1]}")s, durable $(secs "${pc[-1]}")s," \
			"link $(secs "${pl[-1]}")s" >&2
	done
	local mcp mcps mpn mpc mpl
	mcp=$(printf '%s\n' "${cp[@]}" | median)
	mcps=$(printf '%s\n' "${cps[@]}" | median)
	mpn=$(printf '%s\n' "${pn[@]}" | median)
	mpc=$(printf '%s\n' "${pc[@]}" | median)
	mpl=$(printf '%s\n' "${pl[@]}" | median)
	rows+=("$(printf "$fmt" "$name ($files files, $((bytes >> 20)) MiB)" \
		"$(secs "$mcp")" "$(secs "$mcps")" "$(secs "$mpn")" "$(ratio "$mpn" "$mcp")x" \
		"$(secs "$mpc")" "$(ratio "$mpc" "$mcps")x" "$(secs "$mpl")" "$(ratio "$mcp" "$mpl")x")")
	rm -rf "$root" "$grave"
	sync
}

bench small 10000 $((mb << 20))
bench large 16 $((2 * mb << 20))

echo
echo "Median of $runs runs, seconds, workers=$workers. copy: Prepare in copy mode without the"
echo "flush; durable: with it (as shipped); link: Prepare in link mode. Targets: copy/cp <= 1.3x,"
echo "cp/link >= 20x."
echo
printf "$fmt" set "cp -a" "cp -a;sync" copy copy/cp durable durable/cp+s link cp/link
echo "|--------------------------------|--------|------------|--------|---------|---------|--------------|--------|----------|"
printf '%s\n' "${rows[@]}"
