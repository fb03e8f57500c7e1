"""Adapters of the Core port: ``sim`` (the embedded simulated pool) and ``k8s`` (Kubernetes)."""
