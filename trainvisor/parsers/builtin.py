"""Importing this module registers every built-in parser (one module per format family)."""
from . import caffe  # noqa: F401
