# gpufleet.lifecycle — developer entry points.
#   make demo   set up .venv, then a rolling upgrade of a simulated 8-node Slurm fleet (hacking/demo.sh)
#   make test   set everything up (project-local .venv from requirements-dev.txt) and run every suite
#   make help   list the targets
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: help test demo venv sanity units lint docs integration build clean

help:
	@echo "make demo         rolling driver upgrade of a simulated 8-node Slurm fleet (canary, rollback, quarantine)"
	@echo "make test         set up .venv and run sanity, unit, lint, ansible-doc and integration suites"
	@echo "make sanity       ansible-test sanity (builds build/ansible_collections/gpufleet/lifecycle)"
	@echo "make units        pytest unit tests"
	@echo "make lint         ansible-lint --profile production"
	@echo "make docs         ansible-doc renders every plugin"
	@echo "make integration  run playbooks against stand-in GPU tools"
	@echo "make build        ansible-galaxy collection build"

$(STAMP): requirements-dev.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	@touch $@

venv: $(STAMP)
	@$(BIN)/python hacking/install_get_pip.py
	@bash hacking/system_tools.sh

test: venv
	@PATH="$(CURDIR)/$(BIN):$$PATH" bash hacking/run_tests.sh all

demo: venv
	@PATH="$(CURDIR)/$(BIN):$$PATH" bash hacking/demo.sh

sanity units lint docs integration: venv
	@PATH="$(CURDIR)/$(BIN):$$PATH" bash hacking/run_tests.sh $@

build: venv
	$(BIN)/ansible-galaxy collection build --force --output-path build/dist .

clean:
	rm -rf build tests/output .pytest_cache
