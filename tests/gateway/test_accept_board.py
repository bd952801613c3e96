"""The accept board (gateway/accept_board.py): a serving process takes new connections only while no live
process has fewer; a process that stopped refreshing its entry is left out."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gateway.serving.accept_board import STALE_S, AcceptBoard

pytestmark = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="memfd (Linux)")


def test_the_least_loaded_process_accepts_and_ties_all_accept() -> None:
    first = AcceptBoard.create(3)
    try:
        w1, w2 = AcceptBoard.attach(first.fileno(), 1), AcceptBoard.attach(first.fileno(), 2)
        assert w1.processes == w2.processes == 3
        assert first.may_accept(0) and w1.may_accept(0) and w2.may_accept(0)  # 0/0/0: a tie, each may
        assert not first.may_accept(1)  # 1/0/0: the first holds off
        assert w1.may_accept(0)
        assert not w1.may_accept(1)  # 1/1/0
        assert w2.may_accept(0)
        assert w2.may_accept(1) and first.may_accept(1) and w1.may_accept(1)  # 1/1/1: a tie again
    finally:
        first.close()


def test_a_stale_entry_holds_nobody_back() -> None:
    first = AcceptBoard.create(2)
    try:
        worker = AcceptBoard.attach(first.fileno(), 1)
        assert first.may_accept(3)  # the worker has never published: not counted
        assert worker.may_accept(0)
        assert not first.may_accept(3)  # the worker is live with fewer
        time.sleep(STALE_S + 0.2)  # the worker stops refreshing (stopped, hung or dead)
        assert first.may_accept(3)
    finally:
        first.close()


def test_an_index_outside_the_board_or_no_board_is_refused(tmp_path: Path) -> None:
    first = AcceptBoard.create(2)
    try:
        with pytest.raises(ValueError, match="index 2 is not one of 2 processes"):
            AcceptBoard.attach(first.fileno(), 2)
    finally:
        first.close()
    fd = os.open(tmp_path, os.O_RDONLY)  # a descriptor that is no board (a directory)
    try:
        with pytest.raises(OSError):
            AcceptBoard.attach(fd, 1)
    finally:
        os.close(fd)
