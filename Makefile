# The two commands of the README:
#   make run    the main job (installs what it needs, starts the local Kafka broker)
#   make test   every test, after installing everything (CI runs exactly this)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: run test install jars browser lint typecheck unit integration bench soak clean

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

# not part of `make test`: a 5-minute broker outage, 3 workers on 50k events, and the mixed-load soak
# (SEGCOORD_SOAK_S seconds, 1800 by default, with SEGCOORD_SOAK_FAULTS random faults, 20 by default)
soak: install jars
	SEGCOORD_OUTAGE_S=$${SEGCOORD_OUTAGE_S:-300} SEGCOORD_WORKERS_EVENTS=$${SEGCOORD_WORKERS_EVENTS:-50000} \
	  $(BIN)/python -m pytest -s tests/soak \
	  "tests/integration/test_service_broker_restart.py::test_a_long_broker_outage_is_waited_out_nothing_is_lost_and_sigterm_during_one_exits_0" \
	  "tests/integration/test_service_workers.py::test_three_workers_sigkilled_at_random_points_lose_and_double_nothing"

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
