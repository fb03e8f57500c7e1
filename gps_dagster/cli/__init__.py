"""The ``gps-dagster`` command line (the edge: it may read files and the clock)."""
