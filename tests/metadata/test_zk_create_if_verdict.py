"""What ZooKeeper's answer to ``create_if``'s multi-op (the check, the missing parents'
creates, the node's create) means: made, try again (a parent came or went meanwhile),
the node it depends on is gone, or an error that no retry would mend, raised at once."""

from __future__ import annotations

import pytest
from kazoo.exceptions import (
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    QuotaExceededError,
    RolledBackError,
    RuntimeInconsistency,
)

from embedlog.metadata.zookeeper_store import GONE, RETRY, create_if_verdict

MADE = "/streams/cursors/7/c"


@pytest.mark.parametrize(
    ("results", "parents", "verdict"),
    [
        ([True, MADE], 0, None),
        ([True, "/streams/cursors/7", MADE], 1, None),
        # the check: the node it depends on is gone
        ([NoNodeError(), RuntimeInconsistency()], 0, GONE),
        # a parent made by another client between the look and the multi-op
        ([RolledBackError(), NodeExistsError(), RuntimeInconsistency()], 1, RETRY),
        # a parent's own parent removed meanwhile
        ([RolledBackError(), NoNodeError(), RuntimeInconsistency()], 1, RETRY),
        # the node's parent removed between the look and the multi-op
        ([RolledBackError(), NoNodeError()], 0, RETRY),
    ],
)
def test_races_are_tried_again_and_a_gone_node_says_so(results, parents, verdict):
    assert create_if_verdict(results, parents) == verdict


@pytest.mark.parametrize(
    ("results", "parents", "error"),
    [
        ([RolledBackError(), NodeExistsError()], 0, NodeExistsError),  # the node exists
        ([RolledBackError(), NoAuthError(), RuntimeInconsistency()], 1, NoAuthError),
        ([RolledBackError(), QuotaExceededError()], 0, QuotaExceededError),
        ([NoAuthError(), RuntimeInconsistency()], 0, NoAuthError),  # the check, refused
    ],
)
def test_an_error_no_retry_would_mend_is_raised_at_once(results, parents, error):
    assert isinstance(create_if_verdict(results, parents), error)
