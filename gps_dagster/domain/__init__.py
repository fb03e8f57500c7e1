"""The pure domain: no I/O, no framework, no clock. Time is always a parameter."""
