"""The store's copy-on-write contract: stored objects are snapshots nobody can change in place, and
what callers get back or hand in is theirs alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from bot.sim.resources import BY_KIND
from bot.sim.store import Store, micro_ts, ts

NODE = BY_KIND["Node"]


def store() -> Store:
    s = Store(now=lambda: datetime(2026, 1, 1, tzinfo=UTC))
    s.create(NODE, {"metadata": {"name": "n1", "labels": {"a": "1"}}, "spec": {"taints": []}})
    return s


def test_what_get_find_and_list_return_is_a_private_copy():
    s = store()
    for obj in (s.get(NODE, None, "n1"), s.find(NODE, None, "n1"), s.list(NODE)[0]):
        assert obj is not None
        obj["metadata"]["labels"]["a"] = "changed"
        obj["spec"]["taints"].append({"key": "x"})
    assert s.get(NODE, None, "n1")["metadata"]["labels"] == {"a": "1"}
    assert s.get(NODE, None, "n1")["spec"]["taints"] == []


def test_what_create_and_update_are_handed_is_copied_in():
    s = store()
    body = {"metadata": {"name": "n2", "labels": {"b": "2"}}}
    s.create(NODE, body)
    body["metadata"]["labels"]["b"] = "changed"
    current = s.get(NODE, None, "n2")
    current["metadata"]["labels"]["c"] = "3"
    s.update(NODE, current)
    current["metadata"]["labels"]["c"] = "changed"
    assert s.get(NODE, None, "n2")["metadata"]["labels"] == {"b": "2", "c": "3"}


def test_a_snapshot_read_without_a_copy_never_changes_under_its_reader():
    s = store()
    snap = s.peek(NODE, None, "n1")
    listed = s.scan(NODE)
    assert snap is not None and listed == [snap]
    s.mutate("Node", None, "n1", lambda n: n["metadata"]["labels"].update(a="2"))
    s.delete(NODE, None, "n1")
    assert snap["metadata"]["labels"] == {"a": "1"} and listed[0] is snap
    assert s.peek(NODE, None, "n1") is None


def test_a_mutation_that_changes_nothing_keeps_the_resource_version():
    s = store()
    rv = s.get(NODE, None, "n1")["metadata"]["resourceVersion"]
    s.mutate("Node", None, "n1", lambda n: n["metadata"]["labels"].update(a="1"))
    assert s.get(NODE, None, "n1")["metadata"]["resourceVersion"] == rv
    s.mutate("Node", None, "n1", lambda n: n["metadata"]["labels"].update(a="2"))
    assert int(s.get(NODE, None, "n1")["metadata"]["resourceVersion"]) > int(rv)


def test_lists_come_back_in_name_order_as_objects_come_and_go():
    s = store()
    for name in ("n3", "n0", "n2"):
        s.create(NODE, {"metadata": {"name": name}})
    assert [n["metadata"]["name"] for n in s.scan(NODE)] == ["n0", "n1", "n2", "n3"]
    s.delete(NODE, None, "n1")
    assert [n["metadata"]["name"] for n in s.scan(NODE)] == ["n0", "n2", "n3"]


def test_a_stamp_is_of_the_time_it_is_given_even_once_an_equal_instant_was_stamped():
    # stamps are remembered per time: an equal instant in another zone is not the same stamp
    utc = datetime(2026, 3, 1, 12, 0, 0, 250000, tzinfo=UTC)
    east = utc.astimezone(timezone(timedelta(hours=2)))
    assert utc == east
    assert (ts(utc), micro_ts(utc)) == ("2026-03-01T12:00:00Z", "2026-03-01T12:00:00.250000Z")
    assert (ts(east), micro_ts(east)) == ("2026-03-01T14:00:00Z", "2026-03-01T14:00:00.250000Z")
    assert ts(utc + timedelta(seconds=5)) == "2026-03-01T12:00:05Z"
