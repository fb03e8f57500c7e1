"""Pure manifest builders for GPS pods: Track S (KAI scheduler) and Track H (DRA).

Manifests are plain dicts so the Kubernetes backend, the simulator and the golden-file tests all
consume the same output.
"""
