"""Sinks: where parsed events go (JSONL by default)."""
from .base import Sink
from .jsonl import JsonlSink, read_jsonl

__all__ = ["Sink", "JsonlSink", "read_jsonl"]
