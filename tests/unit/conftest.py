"""Fixtures of the replica unit tests."""

import pytest

from replog.replica.records import COMPILED, PURE_PYTHON

# Every implementation of the append-path scans that this installation has: the same tests hold
# for each.
CODECS = [codec for codec in (PURE_PYTHON, COMPILED) if codec is not None]


@pytest.fixture(params=CODECS, ids=lambda codec: codec.name)
def codec(request):
    return request.param
