# The two commands of the README:
#   make run    the main job (installs what it needs, starts the local Kafka broker)
#   make test   every test, after installing everything (CI runs exactly this)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: run test install jars browser lint typecheck unit integration bench clean

$(VENV)/.installed: pyproject.toml
	@command -v java >/dev/null || { echo "Java 17 is required (apt-get install openjdk-17-jre-headless)"; exit 1; }
	@command -v mvn >/dev/null || { echo "installing Maven"; apt-get update -qq && apt-get install -y -qq maven; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@start=$$(date +%s); $(BIN)/pip install -q -e ".[test]" && \
	  echo "[install] python packages ready in $$(( $$(date +%s) - start ))s"
	@touch $@

install: $(VENV)/.installed

jars: install
	@$(BIN)/segcoord jars fetch

# the dashboard's browser test drives Debian's headless chromium
browser:
	@command -v chromium >/dev/null || { echo "installing chromium (the dashboard's browser test)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } || \
	  { echo "chromium is required by the browser test: apt-get install -y chromium (as root)"; exit 1; }

run: install
	$(BIN)/segcoord demo

lint: install
	$(BIN)/ruff check events coordinator streaming tests bench

typecheck: install
	$(BIN)/mypy

unit: install
	$(BIN)/python -m pytest tests/unit

integration: install jars browser
	$(BIN)/python -m pytest tests/integration

# pytest exits 5 when it collected no test: that is a failure here.
test: install jars browser lint typecheck
	@$(BIN)/python -m pytest; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
