"""An example dg project serving gps_dagster through its Component."""
