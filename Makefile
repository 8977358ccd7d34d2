# Every target builds .venv from scratch if it is missing, so a fresh clone needs only python3 and make.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q

.PHONY: demo test test-fast lint bench schema clean image push image-check explore

$(PY):
	$(PYTHON) -m venv $(VENV)

# One stamp per extra set; a change to pyproject.toml reinstalls.
$(VENV)/.stamp-dev: pyproject.toml | $(PY)
	$(PIP) install -e '.[dev,sim,mcp]'
	touch $@

$(VENV)/.stamp-demo: pyproject.toml | $(PY)
	$(PIP) install -e '.[sim]'
	touch $@

# Headless Chromium, for the test that opens the HTML transcript in a real browser: Debian's
# package, installed when missing (as root; otherwise install `chromium` first).
$(VENV)/.stamp-browser: | $(PY)
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  { apt-get install -y -q chromium >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }; } || \
	  { echo "make test needs Chromium: install Debian's chromium package (apt-get install chromium)"; exit 1; }
	touch $@

# promtool, for the tests that check every alert rule and run their unit tests
# (scripts/prometheus_rules.py): Debian's prometheus package, installed when missing like Chromium.
$(VENV)/.stamp-promtool: | $(PY)
	@command -v promtool >/dev/null 2>&1 || \
	  { apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends prometheus >/dev/null; }; } || \
	  { echo "make test needs promtool: install Debian's prometheus package (apt-get install prometheus)"; exit 1; }
	touch $@

# The main job, against the built-in sandbox: a dead node recovered by node-dead-ngns.
demo: $(VENV)/.stamp-demo
	$(VENV)/bin/runbook-bot validate
	$(VENV)/bin/runbook-bot demo

# The whole suite: what CI runs (.ci/run). The container image check is `make image-check`.
# One pytest-xdist worker per core, at most TEST_WORKERS (each runs its own sandboxes and holds
# a few GB at its peak); a test file stays on one worker, so its module fixtures are built once.
TEST_WORKERS ?= 4
test: $(VENV)/.stamp-dev $(VENV)/.stamp-browser $(VENV)/.stamp-promtool
	$(PY) -m pytest -m "not image and not explore" -n auto --maxprocesses $(TEST_WORKERS) --dist loadfile $(ARGS)

# Everything but the tests marked slow, for the edit-test loop.
test-fast: $(VENV)/.stamp-dev
	$(PY) -m pytest -m "not slow and not explore" $(ARGS)

# The explorer at length (docs/explore.md): the planted bugs it must find, then a large search
# of every shipped runbook on every core, which prints its rate, findings and coverage.
explore: $(VENV)/.stamp-dev
	$(PY) -m pytest -m explore tests/explore $(ARGS)
	$(PY) bench/explore.py --timelines $${TIMELINES:-400}

# The complexity and size budget (docs/architecture.md): no block rated worse than D by radon,
# no module in bot/ over 600 lines.
lint: $(VENV)/.stamp-dev
	$(VENV)/bin/ruff check bot tests bench scripts
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(VENV)/bin/xenon --max-absolute D bot
	$(PY) scripts/module_size.py --max-lines 600 bot

# Every benchmark runs and prints its figures; the target fails at the end if any missed.
bench: $(VENV)/.stamp-dev
	@failed=""; for f in bench/*.py; do echo "== $$f"; $(PY) $$f || failed="$$failed $$f"; done; \
	if [ -n "$$failed" ]; then echo "missed their targets:$$failed"; exit 1; fi

# The container image, with docker or podman (docs/deploy.md, "Building the image"). IMAGE is
# its name, where it is pushed to: `make image push IMAGE=REGISTRY/runbook-bot:VERSION`; EXTRAS
# the package's extras in it (EXTRAS=postgres,mcp for the MCP server's image). More
# options in BUILD_FLAGS, e.g. BUILD_FLAGS="--build-arg BASE=... --isolation chroot" (podman where
# no container can be started: RUN steps then run in a chroot).
CONTAINER ?= $(shell command -v podman >/dev/null 2>&1 && echo podman || echo docker)
IMAGE     ?= runbook-bot:dev
EXTRAS    ?= postgres
BUILD_FLAGS ?=
image:
	$(CONTAINER) build $(BUILD_FLAGS) -t $(IMAGE) --build-arg EXTRAS=$(EXTRAS) \
	  --build-arg VERSION=$$($(PYTHON) -c 'import re; print(re.search(r"__version__ = \"(.*)\"", open("bot/__init__.py").read())[1])') \
	  --build-arg REVISION=$$(git rev-parse HEAD 2>/dev/null || echo unknown) \
	  --build-arg CREATED=$$(date -u +%Y-%m-%dT%H:%M:%SZ) .

# Pushes IMAGE (built by `make image` with the same IMAGE) to its registry; log in first.
push:
	$(CONTAINER) push $(IMAGE)

# Builds the image with podman on a base made from Debian's packages (no registry needed) and
# checks it: non-root user, entrypoint, labels, no compiler, runbook-bot runs. Needs root, podman
# and mmdebstrap; takes a few minutes.
image-check: $(VENV)/.stamp-dev
	$(PY) -m pytest -m image tests/deploy/test_image.py $(ARGS)

schema: $(VENV)/.stamp-dev
	$(VENV)/bin/runbook-bot schema > runbooks/runbook.schema.json

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
