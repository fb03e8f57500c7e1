"""``python -m gps_dagster.demo``: ``make demo``."""

from gps_dagster.demo.main import main

raise SystemExit(main())
