# Every target builds .venv from scratch if it is missing, so a fresh clone needs only python3 and make.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q

.PHONY: demo test test-fast lint bench schema clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# One stamp per extra set; a change to pyproject.toml reinstalls.
$(VENV)/.stamp-dev: pyproject.toml | $(PY)
	$(PIP) install -e '.[dev,sim]'
	touch $@

$(VENV)/.stamp-demo: pyproject.toml | $(PY)
	$(PIP) install -e '.[sim]'
	touch $@

# The main job, against the built-in sandbox: a dead node recovered by node-dead-ngns.
demo: $(VENV)/.stamp-demo
	$(VENV)/bin/runbook-bot validate
	$(VENV)/bin/runbook-bot demo

# The whole suite: what CI runs (.ci/run).
test: $(VENV)/.stamp-dev
	$(PY) -m pytest

# Everything but the tests marked slow, for the edit-test loop.
test-fast: $(VENV)/.stamp-dev
	$(PY) -m pytest -m "not slow" $(ARGS)

lint: $(VENV)/.stamp-dev
	$(VENV)/bin/ruff check bot tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# Every benchmark runs and prints its figures; the target fails at the end if any missed.
bench: $(VENV)/.stamp-dev
	@failed=""; for f in bench/*.py; do echo "== $$f"; $(PY) $$f || failed="$$failed $$f"; done; \
	if [ -n "$$failed" ]; then echo "missed their targets:$$failed"; exit 1; fi

schema: $(VENV)/.stamp-dev
	$(VENV)/bin/runbook-bot schema > runbooks/runbook.schema.json

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
