"""The version of boe, stamped on stored runs, schemas, calibrations and reports."""

__version__ = "0.1.0"
