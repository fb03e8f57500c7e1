"""The demo and the development tooling: ``make demo`` and the ``dagster dev`` child we own.

Not the product: no product room imports it (an import-linter contract) and neither the wheel
nor the image carries it (``tests/packaging/test_wheel.py``). It runs from a checkout.

* ``main`` — ``make demo`` (``python -m gps_dagster.demo``): the simulated pool in the Dagster UI.
* ``k8s`` — ``make demo-k8s`` (``python -m gps_dagster.demo.k8s``): the same on the test cluster.
* ``env`` — the env file a second terminal sources (``. var/demo/env``).
* ``devserver`` — ``dagster dev`` as a child process group we fully own.
* ``teardown`` — clean-up on every stop signal (also used by ``tools/`` and ``bench/``).
"""

# Decisions embodied here (docs/decisions.md):
# * “Test machinery and the demo leave the product”
