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
#   BENCH_DATADIR_LOCAL    0 skips the two local sets (default 1)
#
# EFS-like profile (root and /dev/fuse; skipped with a message otherwise):
# the same comparisons on a FUSE loopback that adds 1 ms to every metadata
# operation and fsync and 0.3 ms to every read and write (internal/efsfs),
# with BENCH_DATADIR_EFS_FILES files of 4 KiB (default 10000; 0 skips), all
# on the one mount: Prepare in link and copy mode, cp -al, cp -a, and a
# parallel copy: find | xargs -P BENCH_DATADIR_PARALLEL (default 32, as
# Prepare's default workers) cp -a --parents, 64 files per cp.
#   BENCH_DATADIR_EFS_RUNS runs per measurement there (default 1: cp -a
#                          alone takes minutes)
# Disk needed at the peak: about (1 + 4 x runs) x BENCH_DATADIR_MB MiB.
set -euo pipefail

mb=${BENCH_DATADIR_MB:-1024}
runs=${BENCH_DATADIR_RUNS:-3}
workers=${BENCH_DATADIR_WORKERS:-0}
tmp=${BENCH_DATADIR_TMP:-/var/tmp}

cd "$(dirname "$0")/.."
local_sets=${BENCH_DATADIR_LOCAL:-1}
efs_files=${BENCH_DATADIR_EFS_FILES:-10000}
efs_runs=${BENCH_DATADIR_EFS_RUNS:-1}
par=${BENCH_DATADIR_PARALLEL:-32}
base=$(mktemp -d "$tmp/bench-datadir.XXXXXX")
efspid=
cleanup() {
	if [[ -n $efspid ]]; then
		kill "$efspid" 2>/dev/null || true
		wait "$efspid" 2>/dev/null || true
	fi
	rm -rf "$base"
}
trap cleanup EXIT
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

# timed CMD...: prints the duration of CMD in ns.
timed() {
	local t0 t1
	t0=$(now)
	"$@" >&2
	t1=$(now)
	echo $((t1 - t0))
}

# pcopy SRC DST: directories first, then files by $par cp processes.
pcopy() {
	mkdir "$2"
	(cd "$1" && find . -mindepth 1 -type d -print0 | xargs -0 -r -I{} mkdir -p "$2/{}")
	(cd "$1" && find . -type f ! -name directory-initialized.json -print0 | xargs -0 -r -P "$par" -n 64 cp -a --parents -t "$2")
}

efs_rows=()
efs_bench() {
	local back="$base/efs-backing" mnt="$base/efs-mnt" i
	local pl=() pc=() cal=() ca=() cpp=()
	if [[ $(id -u) != 0 || ! -c /dev/fuse ]]; then
		echo "== efs: SKIPPED: the EFS-like FUSE mount needs root and /dev/fuse" >&2
		return
	fi
	mkdir -p "$back" "$mnt" "$back/graveyard"
	echo "== efs: $efs_files files of 4 KiB on the EFS-like mount: generating" >&2
	# Generated behind the mount, at local speed.
	(cd "$base" && DATADIR_BENCH_ROOT=$back DATADIR_BENCH_FILES=$efs_files DATADIR_BENCH_BYTES=$((efs_files * 4096)) \
		./datadir.test -test.run '^$' -test.bench '^BenchmarkPrepare$' -test.benchtime 1x >/dev/null)
	rm -rf "$back/node-0/v1"
	go build -o "$base/efsmount" ./internal/efsfs/cmd/efsmount
	"$base/efsmount" -backing "$back" -mnt "$mnt" >"$base/efsmount.out" 2>&2 &
	efspid=$!
	for i in $(seq 100); do
		grep -q mounted "$base/efsmount.out" 2>/dev/null && break
		sleep 0.1
	done
	grep -q mounted "$base/efsmount.out" || { echo "efsmount did not mount" >&2; exit 1; }
	# gone NAME: moves a target out of the way behind the mount (removing
	# it through the mount would take as long as making it), and waits
	# for the mount's cache to forget it.
	gone() {
		mv "$back/$1" "$back/graveyard/$2"
		sleep 1.5
	}
	efsprep() { # MODE: one Prepare of node-0/v1 on the mount, ns
		local out
		out=$(cd "$base" && DATADIR_BENCH_ROOT=$mnt DATADIR_BENCH_MODE=$1 DATADIR_BENCH_WORKERS=$workers \
			./datadir.test -test.run '^$' -test.bench '^BenchmarkPrepare$' -test.benchtime 1x)
		awk '/^BenchmarkPrepare/ {print $3; found = 1} END {exit !found}' <<<"$out" || {
			echo "benchmark output not understood:" >&2
			echo "$out" >&2
			exit 1
		}
	}
	local src="$mnt/node-0/v0"
	for ((i = 1; i <= efs_runs; i++)); do
		pl+=("$(efsprep link)")
		gone node-0/v1 "link-$i"
		pc+=("$(efsprep copy)")
		gone node-0/v1 "copy-$i"
		cal+=("$(timed cp -al "$src" "$mnt/cpal-$i")")
		gone "cpal-$i" "cpal-$i"
		ca+=("$(timed cp -a "$src" "$mnt/cpa-$i")")
		gone "cpa-$i" "cpa-$i"
		cpp+=("$(timed pcopy "$src" "$mnt/par-$i")")
		gone "par-$i" "par-$i"
		echo "   run $i: Prepare link $(secs "${pl[-1]}")s, copy $(secs "${pc[-1]}")s; cp -al $(secs "${cal[-1]}")s," \
			"cp -a $(secs "${ca[-1]}")s, xargs -P $par cp -a $(secs "${cpp[-1]}")s" >&2
	done
	local ml mc mal ma mp best
	ml=$(printf '%s\n' "${pl[@]}" | median)
	mc=$(printf '%s\n' "${pc[@]}" | median)
	mal=$(printf '%s\n' "${cal[@]}" | median)
	ma=$(printf '%s\n' "${ca[@]}" | median)
	mp=$(printf '%s\n' "${cpp[@]}" | median)
	best=$((ma < mp ? ma : mp))
	efs_rows+=("$(printf '| %-22s | %6s | %6s | %10s | %6s | %6s | %13s | %10s |' "efs ($efs_files x 4 KiB)" \
		"$(secs "$ml")" "$(secs "$mal")" "$(ratio "$mal" "$ml")x" "$(secs "$mc")" "$(secs "$ma")" "$(secs "$mp")" "$(ratio "$mc" "$best")x")")
	kill "$efspid"
	wait "$efspid" || true
	efspid=
}

if ((local_sets)); then
	bench small 10000 $((mb << 20))
	bench large 16 $((2 * mb << 20))
fi
if ((efs_files > 0)); then
	efs_bench
fi

if ((local_sets)); then
	echo
	echo "Median of $runs runs, seconds, workers=$workers. copy: Prepare in copy mode without the"
	echo "flush; durable: with it (as shipped); link: Prepare in link mode. Targets: copy/cp <= 1.3x,"
	echo "cp/link >= 20x."
	echo
	printf "$fmt" set "cp -a" "cp -a;sync" copy copy/cp durable durable/cp+s link cp/link
	echo "|--------------------------------|--------|------------|--------|---------|---------|--------------|--------|----------|"
	printf '%s\n' "${rows[@]}"
fi
if ((${#efs_rows[@]})); then
	echo
	echo "EFS-like mount (1 ms per metadata operation and fsync, 0.3 ms per read/write), median of"
	echo "$efs_runs run(s), seconds, workers=$workers (0: default). link, copy: Prepare (as shipped, with"
	echo "the flush); parallel: xargs -P $par cp -a. Targets: link <= 3 s, cp-al/link >= 10x,"
	echo "copy/best <= 1 (best of cp -a and parallel)."
	echo
	echo "| set                    |   link | cp -al | cp-al/link |   copy |  cp -a |      parallel |  copy/best |"
	echo "|------------------------|--------|--------|------------|--------|--------|---------------|------------|"
	printf '%s\n' "${efs_rows[@]}"
fi
