# nodeid: see README.md. Every target works on a fresh machine with only Go.
SHELL := /bin/bash
GO ?= go
GOBIN := $(shell $(GO) env GOPATH)/bin
# The VersityGW release the tests run against, written once: internal/versitygw's Version
VERSITYGW_VERSION := $(shell sed -n 's/^const Version = "\(.*\)"$$/\1/p' internal/versitygw/versitygw.go)
ifeq ($(VERSITYGW_VERSION),)
$(error no line const Version = "..." in internal/versitygw/versitygw.go)
endif
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
# Stamped into nodeid-init by scripts/build.sh (which holds the build flags);
# computed once per make run: by default the VERSION file, e.g. 0.1.0 (so
# make release writes dist/nodeid-init-0.1.0-linux-amd64 and make image tags
# 0.1.0); override with e.g. make release VERSION=1.2.3
VERSION ?= $(shell scripts/build.sh --version)
COMMIT ?= $(shell scripts/build.sh --commit)
VERSION := $(VERSION)
COMMIT := $(COMMIT)
BUILD := GO=$(GO) VERSION=$(VERSION) COMMIT=$(COMMIT) scripts/build.sh
DIST ?= dist
RELEASE_ARCHES ?= amd64 arm64

.PHONY: all build release image demo demo-etcd test test-short stress mutants lint versitygw test-tools bench bench-datadir bench-efs-handover chaos clean sim sim-teeth fuzz docs-check

## all (the default): build only; nothing installed (make test installs what tests need)
all: build

## build: compile every package, and nodeid-init (static, stamped) into bin/
build:
	$(GO) build ./...
	$(BUILD) bin/nodeid-init

## release: static, stamped nodeid-init for linux/amd64 and linux/arm64 in
## $(DIST)/nodeid-init-VERSION-linux-ARCH, with $(DIST)/SHA256SUMS
release:
	mkdir -p $(DIST)
	rm -f $(DIST)/nodeid-init-*-linux-* $(DIST)/SHA256SUMS
	for arch in $(RELEASE_ARCHES); do \
		$(BUILD) $(DIST)/nodeid-init-$(VERSION)-linux-$$arch linux $$arch || exit 1; done
	cd $(DIST) && sha256sum nodeid-init-$(VERSION)-linux-* > SHA256SUMS
	@ls -l $(DIST)

## image: the nodeid-init container image for linux/amd64 and linux/arm64,
## built without a container engine (see docs/image.md): static binaries via
## scripts/build.sh, then dist/oci (OCI layout) and dist/nodeid-init-image.tar
IMAGE_REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
IMAGE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
image:
	$(BUILD) dist/linux-amd64/nodeid-init linux amd64
	$(BUILD) dist/linux-arm64/nodeid-init linux arm64
	SOURCE_DATE_EPOCH=$(IMAGE_EPOCH) $(GO) run ./cmd/nodeid-image -version $(VERSION) -revision "$(IMAGE_REVISION)" \
		-bin linux/amd64=dist/linux-amd64/nodeid-init -bin linux/arm64=dist/linux-arm64/nodeid-init \
		-layout dist/oci -tar dist/nodeid-init-image.tar

## demo: three supervised tasks on an S3 server embedded in the demo, a lease
## overwritten, the cluster healing; no AWS account, ends by itself in ~10 s.
## Compiles only what it runs: bin/nodeid-init (stamped) and the demo
demo:
	$(BUILD) bin/nodeid-init
	$(GO) run ./cmd/nodeid-demo -nodeid-init bin/nodeid-init

## demo-etcd: a real 3-member etcd cluster and a spare under nodeid-init, with
## docs/recipes/etcd-member.sh, on the demo's embedded S3 server: a kill -9 and a
## SIGTERM, each member back with its data; ends by itself in ~20 s. Needs the
## Debian packages etcd-server and etcd-client (make test-tools installs them)
demo-etcd:
	$(BUILD) bin/nodeid-init
	$(GO) run ./cmd/nodeid-demo -etcd -nodeid-init bin/nodeid-init

## versitygw: install the S3-compatible server the integration tests run against
versitygw:
	@if ! command -v versitygw >/dev/null 2>&1 && [ ! -x "$(GOBIN)/versitygw" ]; then \
		echo "installing versitygw $(VERSITYGW_VERSION) (about 90 s)"; \
		$(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION); fi

## test-tools: Debian packages some tests need, installed when missing (root):
## strace (a datadir crash test stops Prepare at an exact system call), javac and
## the Jackson jars (internal/camunda checks Camunda's reading rules with the real parser),
## etcd, etcdctl and ZooKeeper (e2e/ runs real clusters under nodeid-init; docs/recipes.md)
test-tools:
	@missing=""; command -v strace >/dev/null 2>&1 || missing="$$missing strace"; \
	{ command -v javac >/dev/null 2>&1 && [ -f /usr/share/java/jackson-databind.jar ]; } || missing="$$missing default-jdk-headless libjackson2-databind-java"; \
	command -v etcd >/dev/null 2>&1 || missing="$$missing etcd-server"; \
	command -v etcdctl >/dev/null 2>&1 || missing="$$missing etcd-client"; \
	[ -x /usr/share/zookeeper/bin/zkCli.sh ] && [ -f /usr/share/java/zookeeper.jar ] || missing="$$missing zookeeper"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" != 0 ]; then echo "make test needs the Debian packages:$$missing (run as root, or install them)"; exit 1; fi; \
		echo "installing$$missing"; apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; fi

## test: every test, with the race detector, unit tests on gofakes3 and
## integration tests on a real VersityGW started by the tests on loopback
test: versitygw test-tools
	CI=$${CI:-true} $(GO) test -race -count=1 ./...

## test-short: the tests that need no VersityGW (they skip through the
## explicit opt-out NODEID_SKIP_INTEGRATION=1; go test -v lists them)
test-short:
	CI= NODEID_SKIP_INTEGRATION=1 $(GO) test -count=1 ./...
	@echo "test-short: SKIPPED every test that needs VersityGW (NODEID_SKIP_INTEGRATION=1); make test runs them"

## stress: the suites of STRESS_PKGS twice, with the race detector, while
## BUSY (default 4) busy loops occupy the machine's two cores: a test that
## holds only on a quiet machine fails here; prints each package's time
## (go test runs the packages side by side) and the wall time
STRESS_PKGS ?= ./nodeid ./cmd/nodeid-init ./chaos ./internal/...
BUSY ?= 4
stress: versitygw test-tools
	@set -o pipefail; busy=""; for i in $$(seq $(BUSY)); do (while :; do :; done) & busy="$$busy $$!"; done; \
	trap 'kill $$busy 2>/dev/null; wait $$busy 2>/dev/null' EXIT; \
	start=$$(date +%s); \
	CI=true $(GO) test -race -count=2 -timeout 60m $(STRESS_PKGS) 2>&1 | \
		awk '{ print; fflush() } /^(ok|FAIL)[ \t]+[a-z]/ { pkgs[++n] = $$0 } END { print "stress: time per package (both runs):"; for (i = 1; i <= n; i++) print "  " pkgs[i] }'; rc=$$?; \
	echo "stress: exit $$rc after $$(( $$(date +%s) - start )) s with $(BUSY) busy loops ($$busy)"; exit $$rc

## mutants: break each safety rule listed in mutants/mutants.txt, one at a
## time, in a scratch copy of the tree (internal/mutants), and run the tests
## named as its killers, then (only if they all pass) the package's fast
## suite; prints a table, fails on any survivor. About 50 s with a warm
## build cache when every mutation is killed (mostly compiling; 11 entries);
## a survivor costs its package's suite (2-7 min). Part of .ci/run.
## MUTANTS=regexp runs only the mutations whose name matches
MUTANTS ?=
mutants:
	GO=$(GO) $(GO) run ./internal/mutants -run '$(MUTANTS)'

## lint: gofmt, go vet and staticcheck
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

## bench: acquisition storm against the anchor's strategy (also with 20-40 ms per
## request), handover, failover, loss detection and steady-state cost on a loopback
## VersityGW (about 9 min); prints a table and writes docs/benchmarks.md
bench: versitygw
	$(GO) run ./bench/cmd/bench -reps 5 -out docs/benchmarks.md

## bench-datadir: data-directory preparation against cp -a (see docs/datadir.md)
bench-datadir:
	bash scripts/bench-datadir.sh

## bench-efs-handover: graceful handover of a broker whose data directory holds
## 10,000 files on the EFS-like FUSE mount (internal/efsfs; root and /dev/fuse),
## SIGTERM to the successor's broker running; prints a table (docs/benchmarks.md)
bench-efs-handover: versitygw
	$(GO) run ./bench/cmd/bench -efs-handover 10000 -reps 3

## chaos: every chaos experiment against real nodeid-init processes and VersityGW
## (about 70 s); prints a table and writes docs/chaos-report.md (see docs/chaos.md)
chaos: versitygw
	$(GO) run ./chaos/cmd/chaos -all

## sim: the deterministic simulation over many seeds, e.g. make sim SEEDS=100000
## (FIRST=N starts at seed N, to split a sweep over processes);
## prints schedules explored and simulated steps per second; stops at the first
## violation unless KEEP_GOING=1 (then counts the seeds per kind of violation)
SEEDS ?= 2000
FIRST ?= 1
KEEP_GOING ?=
sim:
	set -o pipefail; SIM_SEEDS=$(SEEDS) SIM_FIRST=$(FIRST) SIM_KEEP_GOING=$(KEEP_GOING) $(GO) test ./nodeid -run '^TestSimulationSweep$$' -count=1 -timeout 0 -v | grep -E 'simulation:|FAIL|ok|seed'

## sim-teeth: the simulation finds each deliberate bug (brokenRules and the
## simulation's own, all in nodeid's _test.go files); prints the seed that found each
sim-teeth:
	set -o pipefail; $(GO) test ./nodeid -run '^TestSimulationFindsDeliberateBugs$$' -count=1 -timeout 0 -v -sim.teeth | grep -E 'found at|not counted|FAIL|ok|---'

## fuzz: each fuzz target for FUZZTIME (default 15s)
FUZZTIME ?= 15s
fuzz:
	@for t in FuzzDecodeLease FuzzParseLeaseKey FuzzVersionMappings; do \
		echo "== nodeid $$t"; $(GO) test ./nodeid -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) || exit 1; done
	@for t in FuzzParseIDList FuzzSettings; do \
		echo "== nodeid-init $$t"; $(GO) test ./cmd/nodeid-init -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) || exit 1; done

## docs-check: every NODEID_ variable, nodeid-init command line, make target and
## path in README.md and docs/ exists, and every ECS task or container definition
## there is valid, the Dockerfile builds what docs/ecs.md says, and the alert rules and
## the Grafana dashboard name only metrics nodeid-init serves (also part of make test)
docs-check:
	set -o pipefail; $(GO) test ./cmd/nodeid-init -run '^(TestDocsMatchTheCode|TestECS[A-Za-z]*|TestAlertRulesInDocs|TestGrafanaDashboardUsesServedMetrics|TestPromQLMetricNames)$$' -count=1 -v | grep -E 'checked|FAIL|ok'

clean:
	rm -rf bin dist
