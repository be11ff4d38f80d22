# cbc-otel developer tasks. `make test` is the whole suite: the README and
# .ci/run call it. The end-to-end tests need the real Prometheus (Debian
# package `prometheus`) and Jaeger v2 (JAEGER_BIN, built by
# tools/jaeger/build.sh); .ci/run installs both. Outside CI they skip when
# those are missing and say so; with CI=true they fail instead.

GO        ?= go
BIN       ?= bin/cbc-otel
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
FUZZTIME  ?= 30s
PKGS      := ./...
# staticcheck is pinned and run with `go run pkg@version`: no go.mod
# dependency, and the version is the same everywhere. Cold, the first run
# downloads and builds it (about 30 s) before analysing the module.
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK         := $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# In a GitHub Actions job, the wrappers the tests start would otherwise
# append their step summaries to the job's, and keep every run they see
# (the memory tests make 100,000) to write it; and the same for the job's
# step outputs.
unexport GITHUB_STEP_SUMMARY
unexport GITHUB_OUTPUT

.PHONY: all build image image-index demo test race vet lint fmt-check staticcheck cover-floor fuzz bench bench-quick clean chaos screenshot

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/cbc-otel

# The container image, without a Docker engine or a base image: tools/image
# (its own module: go-containerregistry is pinned there, not in go.mod)
# builds the binary as `build` does, for linux/IMAGE_ARCH (amd64, arm64), and
# writes IMAGE_TAR, a tarball for docker load, podman load and kind load
# image-archive, tagged with the chart's default image
# (ghcr.io/cbc-otel/cbc-otel:<Chart.yaml appVersion>). Reproducible: every
# timestamp is SOURCE_DATE_EPOCH, by default the last commit's time, so one
# commit gives one digest. IMAGE_FLAGS passes more flags to the tool (e.g.
# -ca-certs=FILE). Nothing is pushed: deploy/helm/README.md says how.
IMAGE_TAR      ?= bin/cbc-otel-image.tar
IMAGE_ARCH     ?= amd64
IMAGE_EPOCH    ?= $(or $(SOURCE_DATE_EPOCH),$(shell git log -1 --format=%ct 2>/dev/null),0)
IMAGE_REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
image:
	cd tools/image && SOURCE_DATE_EPOCH=$(IMAGE_EPOCH) $(GO) run . -src=$(CURDIR) \
		-o=$(abspath $(IMAGE_TAR)) -arch=$(IMAGE_ARCH) -version=$(VERSION) -revision=$(IMAGE_REVISION) $(IMAGE_FLAGS)

# Both architectures under the one tag: the same image built for each of
# IMAGE_ARCHES (each with the digest `make image IMAGE_ARCH=…` gives), tied
# by a multi-arch index, written to IMAGE_INDEX_TAR as an OCI image layout
# tarball (oci-archive): a docker-archive cannot hold an index, so this is
# a target and a file of its own, and `make image` stays what `kind load
# image-archive` and any docker load read. podman load and docker load
# take the platform of the host; deploy/helm/README.md says how to push it.
IMAGE_INDEX_TAR ?= bin/cbc-otel-image-index.tar
IMAGE_ARCHES    ?= amd64,arm64
image-index:
	cd tools/image && SOURCE_DATE_EPOCH=$(IMAGE_EPOCH) $(GO) run . -src=$(CURDIR) \
		-o=$(abspath $(IMAGE_INDEX_TAR)) -arch=$(IMAGE_ARCHES) -version=$(VERSION) -revision=$(IMAGE_REVISION) $(IMAGE_FLAGS)

demo:
	$(GO) run ./cmd/cbc-otel demo

# docs/runs-page.png, the README's picture of the page at /: `demo --cli-telemetry.join --hold`
# serves its runs (at --simulate.speed 0.5: the simulator's times are the wall
# clock's, so at 0 every bar would be 0 ms), headless Chromium (Debian package chromium) takes the
# screenshot, the demo is stopped. Run it when the page changes; make test
# does not (the e2e test checks the page's DOM instead).
CHROMIUM        ?= chromium
SCREENSHOT_ADDR ?= 127.0.0.1:19478
screenshot: build
	@tmp=$$(mktemp -d); \
	$(BIN) demo --simulate.speed 0.5 --cli-telemetry.join --hold --web.listen-address $(SCREENSHOT_ADDR) >/dev/null 2>$$tmp/demo.err & pid=$$!; \
	for i in $$(seq 600); do grep -q 'until interrupted' $$tmp/demo.err && break; sleep 0.1; done; \
	if grep -q 'until interrupted' $$tmp/demo.err; then \
		$(CHROMIUM) --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
			--disable-component-update --disable-sync --hide-scrollbars --user-data-dir=$$tmp/profile \
			--window-size=1280,900 --screenshot=$(CURDIR)/docs/runs-page.png http://$(SCREENSHOT_ADDR)/ 2>$$tmp/chromium.err; rc=$$?; \
	else \
		echo "demo did not come up:"; cat $$tmp/demo.err; rc=1; \
	fi; \
	kill $$pid 2>/dev/null; wait $$pid; \
	[ $$rc -eq 0 ] || cat $$tmp/chromium.err 2>/dev/null; rm -rf $$tmp; \
	[ $$rc -eq 0 ] && echo "wrote docs/runs-page.png"; exit $$rc

# The whole suite, race detector on: unit, golden, fuzz seed corpora,
# helper-process and end-to-end tests. A test whose real tool (Prometheus,
# Jaeger, Helm, the SDKs) is missing skips, and go test still says ok: so
# internal/realtool appends each skip to the file CBC_SKIP_LOG names, and
# the list ends the output, then how long it took. The exit status is go
# test's.
#
# What turns the real-tool tests on (.ci/run sets them all):
#   prometheus, promtool  on PATH (Debian package prometheus)
#   JAEGER_BIN            a Jaeger v2 (tools/jaeger/build.sh; else built, minutes)
#   HELM_BIN              a Helm v3 (tools/helm/build.sh; else built)
#   CBC_SDK_DIR           npm ci'd e2e/sdk: the Claude Agent SDK, its native
#                         Claude Code 2.1.328, the CodeBuddy SDK (default e2e/sdk)
#   CHROMIUM_BIN          headless Chromium (else chromium on PATH)
#   podman, runc          on PATH, as root (Debian packages podman runc slirp4netns
#                         catatonit): the image and the chart's pod in a real runtime
#   CI=true               a missing tool fails its tests instead of skipping
# Each package's tests are bounded by -timeout 30m; the end-to-end ones
# with every tool take minutes (the e2e package alone several).
test: vet fmt-check cover-floor
	@skips=$$(mktemp); start=$$(date +%s); \
	echo "CBC_SKIP_LOG=$$skips $(GO) test -race -count=1 -timeout 30m $(PKGS)"; \
	CBC_SKIP_LOG=$$skips $(GO) test -race -count=1 -timeout 30m $(PKGS); rc=$$?; \
	echo; \
	if [ -s $$skips ]; then \
		echo "=== real-tool tests SKIPPED ($$(awk -F': ' '{n[$$2]++} END {for (k in n) {printf "%s%s: %d", sep, k, n[k]; sep=", "}}' $$skips)):"; \
		sort $$skips; \
	else \
		echo "=== no real-tool test was skipped"; \
	fi; \
	echo "=== make test: go test took $$(( $$(date +%s) - start )) s"; \
	rm -f $$skips; exit $$rc

race: test

# The serve engine is tested in-process, on a fake clock: its own tests must
# cover at least COVER_FLOOR % of package follow's statements.
COVER_FLOOR ?= 75
cover-floor:
	@pct=$$($(GO) test -count=1 -cover ./follow/ | sed -n 's/.*coverage: \([0-9.]*\)% of statements.*/\1/p'); \
	echo "follow: $$pct% of statements covered by its own tests (floor $(COVER_FLOOR)%)"; \
	awk -v p="$$pct" -v f=$(COVER_FLOOR) 'BEGIN { exit !(p != "" && p + 0 >= f) }'

vet:
	$(GO) vet $(PKGS)
	$(GO) vet -tags chaos ./chaos/

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# The chaos tests carry a build tag: analysed separately, as vet does.
staticcheck:
	$(STATICCHECK) $(PKGS)
	$(STATICCHECK) -tags chaos ./chaos/

lint: vet fmt-check staticcheck

# Native fuzzing, one target at a time (go test -fuzz takes one). A new
# interesting input is minimised for 2 s, not Go's 60 s (chaos/fuzzlib.sh).
fuzz:
	@for p in streamjson ingest clitelemetry internal/otlpjson safetext; do \
		for t in $$($(GO) test -list 'Fuzz.*' ./$$p/ | grep ^Fuzz); do \
			echo "== $$p $$t ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 2s ./$$p/ || exit 1; \
		done; \
	done

# Whole-process benchmarks of issue #11 (bench/harness): passthrough,
# latency, replay against the Node and Collector peers, scaling, memory.
# Prints a table of medians and ratios; asserts no timings.
bench: build
	CBC_OTEL_BIN=$(BIN) bench/run.sh

# A smoke run of the harness (tiny inputs, one run) and of the Go
# micro-benchmarks: checks they work, keeps no figures.
bench-quick: build
	CBC_OTEL_BIN=$(BIN) bench/run.sh -quick
	$(GO) test -run '^$$' -bench . -benchtime 3x ./streamjson/ ./ingest/ ./report/ ./metrics/ ./traces/

clean:
	rm -rf bin

# The fault and abuse suite (issue #10): fuzzing pass + chaos tests against
# the built binaries; prints a table of figures, fails on any breach.
chaos:
	chaos/run.sh
