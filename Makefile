# Two commands on a fresh machine: `make run` trains (pass flags with ARGS="..."; the defaults are the paper's
# settings over 10M steps, about 13 hours on 2 CPU cores: ARGS="--preset cleanrl-short" is 250k, about 25 minutes), `make test` tests.
# tensorboard (--tensorboard), wandb (--track; pinned, as its test reads the files of its offline mode), ray (--actors)
# and minatar (a gymnasium environment) are optional for training but installed here so their tests run.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: run test test-slow lint install

run: $(VENV)/installed
	$(BIN)/python main.py $(ARGS)

# Two processes, one per CPU of this project's 2-core machines. `make test` leaves out the tests marked slow (the
# failure drills through fresh processes and Ray, and second variants of end-to-end runs); CI runs them first.
PYTEST := $(BIN)/python -m pytest -q -n 2 --dist loadgroup

test: $(VENV)/installed
	$(PYTEST) -m "not slow"

test-slow: $(VENV)/installed
	$(PYTEST) -m slow

lint: $(VENV)/installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

install: $(VENV)/installed

# torch 2.13.0 first, unless .venv already has a torch (a GPU build you installed): that
# release's CPU build is on this project's machines' disk, and a bare `torch` requirement would
# otherwise fetch the newest one. Elsewhere pip takes the registry's default build (with CUDA on
# Linux x86-64, several GB); TORCH_INDEX=URL takes it from that wheel index instead (PyTorch's CPU one).
# pytest 8: under pytest 9, pytest-xdist 3.8's --dist loadgroup groups nothing (tests/test_api.py checks it).
TORCH_INDEX ?=
$(VENV)/installed: requirements.txt pyproject.toml Makefile  # a new module or test tool reinstalls
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install --quiet torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install --quiet -r requirements.txt pytest==8.4.2 pytest-xdist==3.8.0 ruff==0.17.6 tensorboard wandb==0.31.0 "ray>=2.40" "setuptools>=68" minatar==1.0.15
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .   # the modules and the dqn-* commands
	touch $@
