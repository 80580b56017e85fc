# gpufleet.lifecycle — developer entry points.
#   make demo   set up .venv, then a rolling upgrade of a simulated 8-node Slurm fleet (hacking/demo.sh)
#   make test   set everything up (project-local .venv from requirements-dev.txt, .venv-216 from requirements-core216.txt)
#               and run every suite, the unit and stand-in integration tests also under ansible-core 2.16
#   make help   list the targets
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The oldest ansible-core the collection supports (meta/runtime.yml), for the units-2.16 and integration-2.16 suites.
VENV216 := .venv-216
STAMP216 := $(VENV216)/.installed

.PHONY: help test demo venv sanity units lint docs integration core216 build clean

help:
	@echo "make demo         rolling driver upgrade of a simulated 8-node Slurm fleet (window mode: canary, rollback, quarantine)"
	@echo "make test         set up .venv and run sanity, unit, lint, ansible-doc and integration suites"
	@echo "make sanity       ansible-test sanity (builds build/ansible_collections/gpufleet/lifecycle)"
	@echo "make units        pytest unit tests"
	@echo "make lint         ansible-lint --profile production"
	@echo "make docs         ansible-doc renders every plugin"
	@echo "make integration  run playbooks against stand-in GPU tools"
	@echo "make core216      the unit and stand-in integration tests under ansible-core 2.16 (.venv-216)"
	@echo "make build        ansible-galaxy collection build"

$(STAMP): requirements-dev.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	@touch $@

$(STAMP216): requirements-core216.txt
	@test -x $(VENV216)/bin/python || $(PYTHON) -m venv $(VENV216)
	$(VENV216)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-core216.txt
	@touch $@

venv: $(STAMP) $(STAMP216)
	@$(BIN)/python hacking/install_get_pip.py
	@bash hacking/system_tools.sh

# run_tests.sh all makes venv itself, after it has started the simulated fleet's prebuild in the background.
test:
	@PATH="$(CURDIR)/$(BIN):$$PATH" bash hacking/run_tests.sh all

demo: venv
	@PATH="$(CURDIR)/$(BIN):$$PATH" bash hacking/demo.sh

sanity units lint docs integration core216: venv
	@PATH="$(CURDIR)/$(BIN):$$PATH" bash hacking/run_tests.sh $@

build: venv
	$(BIN)/ansible-galaxy collection build --force --output-path build/dist .

clean:
	rm -rf build tests/output .pytest_cache
