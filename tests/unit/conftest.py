"""Fixtures of the replica unit tests."""

import pytest

from replog.replica import log as log_module
from replog.replica import segment as segment_module
from replog.replica.records import COMPILED, PURE_PYTHON

# Every implementation of the append-path and recovery scans that this installation has: the same
# tests hold for each.
CODECS = [codec for codec in (PURE_PYTHON, COMPILED) if codec is not None]


@pytest.fixture(params=CODECS, ids=lambda codec: codec.name)
def codec(request):
    return request.param


@pytest.fixture(params=CODECS, ids=lambda codec: f"log-{codec.name}")
def log_codec(request, monkeypatch):
    """Every Log of the test appends and recovers through this codec, so that the log-level tests
    cover the pure-Python fallback end to end and not only the compiled default."""
    monkeypatch.setattr(log_module, "assign_batches", request.param.assign_batches)
    monkeypatch.setattr(log_module, "validate_batches", request.param.validate_batches)
    monkeypatch.setattr(segment_module, "scan_segment", request.param.scan_segment)
    return request.param
