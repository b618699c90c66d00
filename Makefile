# berm — see README.md. As root, `make demo` and `make test` do all the set-up themselves.
GO       ?= go
BIN      := bin
# The Grafana datasource plugin, installable as it is (see dashboards/README.md).
PLUGIN   := $(BIN)/grafana/berm-datasource
# cmd/berm (the front) and cmd/berm-stage (the tool's stage) are C; the others are Go.
CMDS     := $(filter-out internal berm berm-stage,$(notdir $(patsubst %/,%,$(wildcard cmd/*/))))
CC       ?= cc
# Static when the C library's archive is there: no dynamic loader on every call.
FRONT_LDFLAGS ?= $(shell echo 'int main(void){return 0;}' | $(CC) -x c -static -o /dev/null - 2>/dev/null && echo -static)
GOTEST   ?= $(GO) test -count=1 -timeout 45m -p 2

.PHONY: all build front grafana screenshots deps generate check-generated vmlinux test test-unit test-race demo bench corpus clean stack stack-down

all: build

# What `berm version` says of the build (cmd/internal/version): the checkout's description
# and commit, as GOFLAGS=-buildvcs=false or a tarball leaves Go's own stamp out.
VERSION_PKG := github.com/bermsec/berm/cmd/internal/version
VERSION_LDFLAGS ?= -X $(VERSION_PKG).Version=$(shell git describe --tags --always --dirty 2>/dev/null) \
	-X $(VERSION_PKG).Commit=$(shell git rev-parse HEAD 2>/dev/null)

build:
	@mkdir -p $(BIN)
	$(GO) build -ldflags "$(VERSION_LDFLAGS)" -o $(BIN)/ $(addprefix ./cmd/,$(CMDS))
	$(MAKE) --no-print-directory front

# The C binaries alone (testenv/bermbin builds them so for tests, FRONT and STAGE naming where).
FRONT ?= $(BIN)/berm
STAGE ?= $(dir $(FRONT))berm-stage
front:
	$(CC) -O2 -Wall -Wextra $(FRONT_LDFLAGS) -o $(FRONT) cmd/berm/main.c
	$(CC) -O2 -Wall -Wextra $(FRONT_LDFLAGS) -o $(STAGE) cmd/berm-stage/main.c
	@mkdir -p $(PLUGIN)/img
	$(GO) build -o $(PLUGIN)/gpx_berm-datasource_$$($(GO) env GOOS)_$$($(GO) env GOARCH) ./dashboards/plugin/cmd/berm-datasource
	cp dashboards/plugin/dist/plugin.json dashboards/plugin/dist/module.js $(PLUGIN)/
	cp dashboards/plugin/dist/img/logo.svg $(PLUGIN)/img/
	@mkdir -p $(BIN)/grafana/dashboards
	cp dashboards/*.json $(BIN)/grafana/dashboards/
	cp -r dashboards/provisioning $(BIN)/grafana/

# Debian packages the build, tests and demo use (clang only for `make generate`).
deps:
	@testenv/install-deps.sh

# Regenerate the eBPF objects and their Go loaders (needs clang, llvm, libbpf-dev).
generate:
	cd bpf && $(GO) generate ./...

# The committed objects must be what the C sources compile to.
check-generated: generate
	@git diff --exit-code --stat -- bpf/ || { echo "bpf/: committed generated files are stale: run 'make generate' and commit"; exit 1; }

vmlinux:
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > bpf/include/vmlinux.h

# Everything: pure-logic tests run anywhere; kernel, cgroup and ClickHouse tests need root.
# Then the pure-logic tests again under the race detector, which is what gives the tests of
# concurrent code (rules' TestSwapConcurrent, the journal's writers) their meaning: -short
# selects them, as testenv/testutil skips there whatever needs root, a kernel feature or a
# real server.
test: deps build grafana
	$(GO) vet ./...
	$(GOTEST) ./...
	cd cmd/bermd/deploy/helm && $(GO) vet ./... && $(GOTEST) ./... # the Helm chart: its own module
	$(MAKE) test-race

# The Grafana server the dashboards' tests provision and its web frontend, which the browser
# tests open (both built from Grafana's Go module, minutes the first time, cached under
# /var/cache/berm/grafana after).
grafana:
	$(GO) run ./testenv/grafana/buildgrafana -frontend

# The dashboards' screenshots in dashboards/docs (dashboards/README.md shows them), made by
# the browser test from real calls in a real ClickHouse, through a real Grafana (needs root).
screenshots: grafana
	flock /tmp/berm-kernel.lock $(GO) test -count=1 ./dashboards -run 'TestDashboardsInABrowser' -screenshots $(CURDIR)/dashboards/docs

# The pure-logic tests only: no root needed.
test-unit:
	$(GOTEST) -short ./...

test-race:
	$(GOTEST) -race -short ./...

# The seed incident as a tool call, on the embedded default (no daemon, no ClickHouse).
demo: build
	@testenv/demo.sh

bench: deps build
	@testenv/bench.sh

# ClickHouse, berm-collector, bermd, Prometheus and Grafana (berm's plugin and dashboards) on
# loopback, until Ctrl-C or `make stack-down` (testenv/stack/README.md). Run again while it is
# up, it prints where it is.
STACK_DIR ?= .stack
stack: build grafana
	$(GO) build -o $(BIN)/berm-stack ./testenv/stack
	@$(BIN)/berm-stack up --bin $(BIN) --dir $(STACK_DIR)

stack-down:
	@$(GO) run ./testenv/stack down --dir $(STACK_DIR)

# Detection coverage (root): every atomic-red-team Linux atomic and every benign behaviour of
# testenv/corpus as one berm run call under the strict policy; per technique: ran, contained
# (denied), alerted; and the benign side's false positives. Timelines are kept in .corpus/.
corpus: build
	$(GO) run ./testenv/corpus -berm $(BIN)/berm -out .corpus -summary .corpus/summary.md

# Every fuzz test where hostile bytes enter, one after another, each for FUZZTIME (a crash is
# kept in the package's testdata/fuzz/; testenv/fuzz/README.md). `go test` replays the seeds.
# A bare "context deadline exceeded" at the end of a run, with no input written, is Go 1.26's
# fuzz coordinator (golang/go#75804), not a finding: it does not fail the target.
FUZZTIME ?= 30s
FUZZ_TARGETS := sandboxer/callproto:FuzzReadInvocation sandboxer/callproto:FuzzDecodeRequest cmd/internal/runcli:FuzzInvoke \
	agent/policy:FuzzParse rules:FuzzLoad agent/journal:FuzzScan agent/journal:FuzzAppendAfterTornTail agent/journal:FuzzDecodeRecord \
	agent/dnsguard:FuzzQuery agent/dnsguard:FuzzAnswer
.PHONY: fuzz
fuzz:
	@log=$$(mktemp); failed=; for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t#*:} in ./$${t%%:*} for $(FUZZTIME)"; \
		$(GO) test -count=1 -run '^$$' -fuzz "^$${t#*:}\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 10s ./$${t%%:*} >$$log 2>&1; \
		rc=$$?; grep -v '^fuzz: elapsed' $$log; grep '^fuzz: elapsed' $$log | tail -1; \
		if [ $$rc -ne 0 ] && { grep -q 'Failing input written' $$log || ! grep -q '^    context deadline exceeded$$' $$log; }; then failed="$$failed $${t#*:}"; fi; \
	done; rm -f $$log; if [ -n "$$failed" ]; then echo "fuzz: failed:$$failed"; exit 1; fi

clean:
	rm -rf $(BIN) .bench .corpus .stack
