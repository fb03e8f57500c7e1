"""GPU reservations (R-GPS): ledger models, admission, rendering, witness, billing.

Every module here except ``cli`` is pure: no I/O, no clock, no Kubernetes
client. Manifests are plain dicts so that the Kubernetes backend, the
simulator and the golden-file tests all consume the same output.
"""
