# Effectively-once webhooks. `make test` is what CI runs; `make help` lists targets.
SHELL := /bin/bash
GO    ?= go
FUNCTIONS := $(notdir $(patsubst %/,%,$(wildcard functions/*/)))
BUILD_FLAGS := -tags lambda.norpc -trimpath -buildvcs=false -ldflags "-s -w"

.PHONY: help dev dev-shop demo warehouse build fuzz test test-race test-short test-infra test-dynalite synth deploy lint tidy-check clean bench chaos load FORCE

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

# dev runs the built binary, not `go run`: go run exits 1 on Ctrl-C even when
# its program stopped cleanly, and make would report that as an error.
dev: ## run the whole pipeline locally (foreground; Ctrl-C stops it): HTTP API on 127.0.0.1:3000
	@$(GO) build -o build/host/dev ./scripts/dev
	@exec build/host/dev

dev-shop: ## `make dev` for the example shop (examples/shop): its own function mains and dev.json
	@$(GO) build -o build/host/dev ./scripts/dev
	@DEV_MODULE=examples/shop exec build/host/dev

demo: ## send the demo story to the local stack (starts one if none runs) and print the business outcome
	$(GO) run ./scripts/demo

# SQL reaches the script through the environment (make exports a variable
# set on its command line), so no quoting of the query is needed here.
warehouse: ## query the running make dev's warehouse with DuckDB: current_state, or SQL='SELECT … FROM records' (views records, current_state)
	@$(GO) run ./scripts/warehouse "$$SQL"

bench: ## reproduce BENCHMARKS.md and its plots (docs/bench/*.png): benchmarks, requests, write units, cost, cold start, load, chaos (~10 min)
	$(GO) run ./scripts/bench $(BENCH_ARGS)

N ?= 1000
chaos: ## run N random chaos schedules (default 1000) of our design against the reference model; SEED=, DESIGN=all adds the naive designs
	$(GO) run ./scripts/chaos -n $(N) $(if $(SEED),-seed $(SEED)) $(if $(DESIGN),-design $(DESIGN))

load: ## send signed deliveries to a running `make dev` (LOAD_ARGS='-rate 50 -duration 10s')
	$(GO) run ./scripts/load $(LOAD_ARGS)

build: $(FUNCTIONS:%=build/%/bootstrap) ## build every Lambda as build/<fn>/bootstrap (linux/arm64)
	@ls -l $(FUNCTIONS:%=build/%/bootstrap)

build/%/bootstrap: FORCE
	@mkdir -p $(dir $@)
	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) build $(BUILD_FLAGS) -o $@ ./functions/$*

test: ## every test against in-process DynamoDB (minidyn) and SQS (goaws), the example modules' (examples/shop, examples/saas), the ledger's contract tests on dynalite, each fuzz target briefly, the stack's
	$(GO) test -count=1 -parallel 8 ./...
	cd examples/shop && $(GO) vet ./... && $(GO) test -count=1 ./...
	cd examples/saas && $(GO) vet ./... && $(GO) test -count=1 ./...
	@$(MAKE) --no-print-directory test-dynalite
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZTIME_TEST)
	@$(MAKE) --no-print-directory test-infra
	@$(MAKE) --no-print-directory test-examples-infra

# dynalite: a second, stricter DynamoDB (AWS's validation, no transactions),
# pinned in scripts/dynalite/package.json; tests only: it catches requests
# DynamoDB refuses that minidyn lets pass.
DYNALITE := scripts/dynalite/node_modules/.bin/dynalite
$(DYNALITE): scripts/dynalite/package.json scripts/dynalite/package-lock.json
	cd scripts/dynalite && npm ci --no-audit --no-fund
	@touch $@

test-dynalite: $(DYNALITE) ## the ledger's tests on dynalite (those without transactions), then the ledger and pipeline tests on minidyn with every transaction's parts validated by dynalite
	$(GO) run ./scripts/dynalite -mode full -- $(GO) test -count=1 ./internal/ledger/
	$(GO) run ./scripts/dynalite -mode strict -- $(GO) test -count=1 -parallel 4 ./internal/ledger/ ./internal/harness/pipelinetest/

FUZZTIME_TEST ?= 3s
FUZZTIME ?= 60s
fuzz: ## run every fuzz target (FUZZTIME each, default 60s); a failure leaves its input in testdata/fuzz
	@set -e; for dir in $$(grep -rl --include='*_test.go' '^func Fuzz' pkg internal | xargs -n1 dirname | sort -u); do \
	  for f in $$(grep -h '^func Fuzz' $$dir/*_test.go | sed 's/func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
	    echo "fuzz $$f ($$dir, $(FUZZTIME))"; \
	    if ! $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) ./$$dir > /tmp/fuzz-$$f.log 2>&1; then \
	      if [ -n "$$(ls $$dir/testdata/fuzz/$$f 2>/dev/null)" ]; then cat /tmp/fuzz-$$f.log; exit 1; fi; \
	      echo "  $$f stopped without a failing input (a fuzzing-engine hiccup under load); running it again"; \
	      $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) ./$$dir > /tmp/fuzz-$$f.log 2>&1 || { cat /tmp/fuzz-$$f.log; exit 1; }; \
	    fi; \
	  done; \
	done

test-race: ## the tests under the race detector
	$(GO) test -race -count=1 -parallel 8 ./...

test-short: ## the fast subset (skips the crash matrix)
	$(GO) test -short ./...

lint: ## gofmt check, go vet, staticcheck (pinned in go.mod); gofmt and go vet for infra/; all three for examples/shop and examples/saas
	@out=$$(gofmt -l $$(git ls-files '*.go') $$(find infra examples -name node_modules -prune -o -name '*.go' -print)); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
	sc=$$($(GO) tool -n staticcheck) && cd examples/shop && $(GO) vet ./... && $$sc ./...
	sc=$$($(GO) tool -n staticcheck) && cd examples/saas && $(GO) vet ./... && $$sc ./...
	cd infra && $(INFRA_ENV) $(GO) vet ./...

tidy-check: ## fail if go.mod/go.sum are not tidy
	@cp go.mod /tmp/go.mod.bak; cp go.sum /tmp/go.sum.bak
	@$(GO) mod tidy
	@if ! diff -q go.mod /tmp/go.mod.bak >/dev/null || ! diff -q go.sum /tmp/go.sum.bak >/dev/null; then \
		echo "go.mod/go.sum not tidy; run 'go mod tidy'"; cp /tmp/go.mod.bak go.mod; cp /tmp/go.sum.bak go.sum; exit 1; fi
	@echo "go.mod and go.sum are tidy"

clean: ## remove build output and the cloud assembly
	rm -rf build cdk.out

# --- infrastructure (infra/: its own Go module; the CDK CLI pinned in infra/package.json)
# Offline and quiet: no CLI telemetry, no notices, no version check (cdk.json
# says the same). Node 20's end-of-life banner from the jsii runtime is
# silenced; infra/README.md recommends Node 22+. GOFLAGS=-mod=mod lets infra
# follow a dependency that pkg/ gains (infra requires the root module
# through a replace) without a hand-run go mod tidy.
CDK       := infra/node_modules/.bin/cdk
INFRA_ENV := JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 GOFLAGS=-mod=mod
CDK_ENV   := $(INFRA_ENV) CDK_DISABLE_CLI_TELEMETRY=true CDK_DISABLE_VERSION_CHECK=true
# make synth STAGE=prod CDK_ARGS='-c alarmEmail=ops@example.com'
STAGE     ?=
CDK_ARGS  ?=
CDK_CTX   := $(if $(STAGE),-c stage=$(STAGE)) $(CDK_ARGS)

$(CDK): infra/package.json infra/package-lock.json
	cd infra && npm ci --no-audit --no-fund
	@touch $@

test-infra: ## the CDK stack's assertion tests and cdk-nag checks (a cold Go cache builds the CDK module first: ~3 min on 2 cores)
	cd infra && $(INFRA_ENV) $(GO) test -count=1 ./...

.PHONY: test-examples-infra
test-examples-infra: ## the example modules' own CDK apps (examples/shop/infra, examples/saas/infra, each its own module over infra/pipeline): synthesized, cdk-nag clean, their grants checked, their functions built from their module (linux/arm64)
	cd examples/shop/infra && $(INFRA_ENV) $(GO) test -count=1 ./...
	cd examples/saas/infra && $(INFRA_ENV) $(GO) test -count=1 ./...

# cdk.out must exist before the app runs, and be named by an absolute
# path: the CLI points the app's performance-counters and error files into
# it by the path it was given, and the app runs in infra/ (cdk.json), where
# a relative cdk.out/ does not exist (ENOENT at the end of the synth).
CDK_OUT := $(CURDIR)/cdk.out
synth: $(CDK) ## build every function (linux/arm64) and synthesize the CloudFormation template offline into cdk.out/ (STAGE=, CDK_ARGS=)
	@mkdir -p $(CDK_OUT)
	$(CDK_ENV) $(CDK) synth --output $(CDK_OUT) --no-notices --quiet $(CDK_CTX)
	@ls cdk.out/*.template.json

# The app builds every function from functions/<fn> at synth
# (pipeline.GoBuild); -c prebuilt=true takes build/<fn>/bootstrap instead.
deploy: $(CDK) ## cdk deploy (building every function at synth) into the account of your AWS credentials (STAGE=, CDK_ARGS=)
	@mkdir -p $(CDK_OUT)
	$(CDK_ENV) $(CDK) deploy --output $(CDK_OUT) --no-notices $(CDK_CTX)
FORCE:
