# Two commands for a fresh machine (see README):
#   make app   -> creates .venv if missing, installs, starts the app on the offline default
#   make test  -> creates .venv if missing, installs, runs the whole test suite
# Both are idempotent: the install step re-runs only when requirements.txt or
# pyproject.toml changed (stamp file), so a second run does not reinstall.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.mixdp-installed
PORT ?= 8501

.PHONY: app test install browser bench bench-tiny clean-venv screenshots

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): requirements.txt pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

app: install
	$(VENV)/bin/streamlit run app.py --server.port $(PORT)

# Headless Chromium for the end-to-end test (Debian packages; needs root, as on CI).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null); \
	  else echo "chromium missing and not root: the end-to-end test will be skipped"; fi; }

test: install browser
	OMP_NUM_THREADS=1 $(PY) -m pytest -n 2 --dist loadgroup

# Retake docs/screenshots/ (and timings.json) from the end-to-end browser test.
screenshots: install browser
	MIXDP_SCREENSHOTS=docs/screenshots OMP_NUM_THREADS=1 $(PY) -m pytest tests/app/test_e2e_browser.py -q -s

# Every benchmark (benchmarks/_*.py are helper modules, not benchmarks); each prints one JSON
# object as its last stdout line. bench-tiny: the smallest sizes (what tests/test_benchmarks_tiny.py runs).
bench: install
	for b in benchmarks/[!_]*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

bench-tiny: install
	for b in benchmarks/[!_]*.py; do echo "== $$b"; $(PY) $$b --tiny || exit 1; done

clean-venv:
	rm -rf $(VENV)
