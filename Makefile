# `make test` and `make run` bootstrap .venv on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8501
STAMP := $(VENV)/.installed

RENDERER := tests/markdown_renderer
RENDERER_STAMP := $(RENDERER)/node_modules/.installed

.PHONY: test test-sqlite test-postgres test-quick run lint demo docs cli-docs figures clean

# Tests run in parallel: one worker per core, each taking the next test when free (worksteal).
# `make test PARALLEL=` runs them in one process; --durations lists what costs most.
PARALLEL ?= -n auto --dist worksteal
PYTEST := $(BIN)/python -m pytest -q $(PARALLEL) --durations=20

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Streamlit's Markdown libraries, for the sanitiser's tests (tests/markdown_renderer).
$(RENDERER_STAMP): $(RENDERER)/package.json $(RENDERER)/package-lock.json
	npm ci --prefix $(RENDERER) --no-audit --no-fund --loglevel=error
	touch $(RENDERER_STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The docs site, into site/; --strict makes every warning (a broken link, a page left out of
# the navigation) an error. NO_MKDOCS_2_WARNING hides Material's banner on its end of life
# (May 2027), which is news, not a problem of these docs.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The CLI reference page from the commands' help; run it after changing a help text.
cli-docs: $(STAMP)
	$(BIN)/python docs/cli_reference.py

# Every measurement on the figures page, run again (minutes).
figures: $(STAMP)
	$(BIN)/python docs/figures.py

# Two passes: every test on SQLite, then the tests that use a database (marked `db`, which
# includes one browser journey) on PostgreSQL in a throwaway cluster (skipped with a message
# where PostgreSQL is not installed, except under CI=true).
test: lint docs test-sqlite test-postgres

test-sqlite: $(STAMP) $(RENDERER_STAMP)
	$(PYTEST)

test-postgres: $(STAMP)
	bash .ci/with-postgres $(PYTEST) -m db

# The tests not marked slow (no browser, no killed processes), on SQLite only.
test-quick: lint $(RENDERER_STAMP)
	$(BIN)/python -m pytest -q $(PARALLEL) -m "not slow"

# The demo's summary (JSON) is left out: `make run` ends with the app's address.
demo: $(STAMP)
	$(BIN)/pcf demo --if-missing >/dev/null

# This machine only (127.0.0.1): without sign-in the app is one local person's. See the docs,
# Team set-up, to serve a team.
run: demo
	$(BIN)/streamlit run app.py --server.headless true --server.address 127.0.0.1 --server.port $(PORT)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache site $(RENDERER)/node_modules
