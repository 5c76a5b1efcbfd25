"""What only the ZooKeeper backend does: its kazoo handler's select."""

from __future__ import annotations

import os
import resource
import socket

import pytest

from replog.coord_backends.zookeeper import PollingHandler


def test_select_reports_the_ready_descriptors_of_each_list():
    handler = PollingHandler()
    left, right = socket.socketpair()
    with left, right:
        assert handler.select([left], [], [], 0) == ([], [], [])
        assert handler.select([left], [right], [], 0) == ([], [right], [])
        right.send(b"x")
        assert handler.select([left, right], [], [], 0) == ([left], [], [])
        # kazoo passes descriptors and socket objects alike.
        assert handler.select([left.fileno()], [left.fileno()], [], None) == ([left.fileno()], [left.fileno()], [])


def test_select_reports_a_hang_up_as_readable():
    handler = PollingHandler()
    left, right = socket.socketpair()
    with left:
        right.close()
        assert handler.select([left], [], [], 0) == ([left], [], [])


def test_select_takes_descriptors_above_select_2s_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1100:
        pytest.skip(f"the descriptor limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1100), hard))
    handler = PollingHandler()
    left, right = socket.socketpair()
    high = os.dup2(left.fileno(), 1050)
    try:
        right.send(b"x")
        assert handler.select([high], [], [], 0) == ([high], [], [])
    finally:
        os.close(high)
        left.close()
        right.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
