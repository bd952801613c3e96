"""Which stores share a streaming query (issue 23 item 4): buckets, the per-query cap, groups kept across restarts.

No Spark: ``plan_groups`` only reads declarations and ``checkpoints/@shared``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stores import Column, SqlType, StoreKind, StoreSpec
from stores.pipeline.shared_query import has_own_checkpoint, plan_groups, shared_root
from stores.pipeline.topology import StoreDecl


def decl(name: str, shape: str = "aggregate", mode: str = "update", streams: tuple[str, ...] = ("1",),
         topics: tuple[str, ...] = ("orders",)) -> StoreDecl:
    spec = StoreSpec(name, StoreKind.TIMESTAMPED_KEY_VALUE, Column("key", SqlType.VARCHAR),
                     (Column("v", SqlType.DOUBLE),), partitions=4, source_topics=topics)
    return StoreDecl(spec, None, shape, mode, "key", ("v",), None, None, frozenset(streams))


def names(groups) -> list[list[str]]:
    return [g.names for g in groups]


def test_stores_over_one_stream_and_mode_share_up_to_the_cap(tmp_path: Path) -> None:
    decls = [decl(f"a{i}") for i in range(7)] + [
        decl("l0", "latest", "append"), decl("l1", "versioned", "append"),  # append: a group of their own
        decl("w0", "window"), decl("s0", "session", "append"),  # windows and sessions keep their own query
        decl("o0", streams=("2",)),  # another stream: alone, so no group
        decl("x0", "aggregate", "append"),  # an aggregate in a mode it cannot share in
    ]
    groups = plan_groups(tmp_path, decls, 3, lambda n: False)
    assert names(groups) == [["a0", "a1", "a2"], ["a3", "a4", "a5"], ["l0", "l1"]]  # a6 alone: its own query
    assert len({g.gid for g in groups}) == 3 and all(g.checkpoint.parent == shared_root(tmp_path) for g in groups)
    assert plan_groups(tmp_path, decls, 1, lambda n: False) == []  # stores_per_query=1: no sharing


def test_a_store_with_its_own_checkpoint_keeps_its_own_query(tmp_path: Path) -> None:
    def solo(n: str) -> bool:
        return has_own_checkpoint(tmp_path / "checkpoints" / n)

    own = tmp_path / "checkpoints" / "a1"
    assert not has_own_checkpoint(own)
    (own / "offsets").mkdir(parents=True)
    (own / "offsets" / "0").write_text("v1\n{}\n")
    assert has_own_checkpoint(own)
    [g] = plan_groups(tmp_path, [decl("a0"), decl("a1"), decl("a2")], 32, solo)
    assert g.names == ["a0", "a2"] and not g.detached
    g.save()
    # a member rebuilt on its own query later stays in the recorded union, detached: the others keep their state
    (tmp_path / "checkpoints" / "a2" / "commits").mkdir(parents=True)
    (tmp_path / "checkpoints" / "a2" / "commits" / "3").write_text("v1\n{}\n")
    [again] = plan_groups(tmp_path, [decl("a0"), decl("a1"), decl("a2")], 32, solo)
    assert again.gid == g.gid and again.names == ["a0", "a2"] and again.detached == {"a2"}


def test_recorded_groups_are_kept_in_their_order_and_new_stores_form_new_groups(tmp_path: Path) -> None:
    decls = [decl(n) for n in ("a", "b", "c")]
    [g] = plan_groups(tmp_path, decls, 32, lambda n: False)
    g.save()
    again = plan_groups(tmp_path, [decl(n) for n in ("c", "b", "a", "d", "e")], 32, lambda n: False)
    assert names(again) == [["a", "b", "c"], ["d", "e"]] and again[0].gid == g.gid  # same union, same checkpoint
    # a recorded group whose members are no longer all there (or not shareable) is abandoned: the members left
    # are rebuilt by queries of their own (their state was in it), so none of them joins a group this time
    (g.checkpoint / "members.json").write_text(json.dumps({"members": ["a", "b", "gone"]}))
    why: dict[str, str] = {}
    assert plan_groups(tmp_path, decls, 32, lambda n: False, abandoned=why) == [] and set(why) == {"a", "b"}
    assert not g.checkpoint.exists()


@pytest.mark.parametrize("text", ["not json", '{"members": 3}', "{}"])
def test_a_damaged_member_list_is_ignored(tmp_path: Path, text: str) -> None:
    bad = shared_root(tmp_path) / "0123456789ab"
    bad.mkdir(parents=True)
    (bad / "members.json").write_text(text)
    assert names(plan_groups(tmp_path, [decl("a"), decl("b")], 32, lambda n: False)) == [["a", "b"]]


def test_a_group_whose_member_changed_is_abandoned_and_its_mates_are_rebuilt_alone(tmp_path: Path) -> None:
    """Issue 20: the union of a changed member is another plan; the recorded state cannot be kept."""
    prints = {"a0": "f0", "a1": "f1", "a2": "f2"}
    decls = [decl("a0"), decl("a1"), decl("a2")]
    [g] = plan_groups(tmp_path, decls, 32, lambda n: False, prints.get)
    assert g.fingerprints == prints
    g.save()
    (g.checkpoint / "state").mkdir()
    [kept] = plan_groups(tmp_path, decls, 32, lambda n: False, prints.get)  # nothing changed: the same group
    assert kept.gid == g.gid and kept.fingerprints == prints
    why: dict[str, str] = {}
    changed = {**prints, "a1": "f1-new"}
    groups = plan_groups(tmp_path, decls, 32, lambda n: n == "a1", changed.get, why)
    assert groups == []  # a0 and a2 are rebuilt by queries of their own, a1 by its upgrade
    assert set(why) == {"a0", "a2"} and "shared streaming query was abandoned (a1 changed its definition)" in why["a0"]
    assert not g.checkpoint.exists()  # the abandoned state is deleted
    assert plan_groups(tmp_path, decls, 32, lambda n: True, changed.get) == []


def test_recorded_groups_without_fingerprints_or_unknown_definitions_are_kept(tmp_path: Path) -> None:
    decls = [decl("a0"), decl("a1")]
    [g] = plan_groups(tmp_path, decls, 32, lambda n: False)  # no definitions known (a hand-written topology)
    assert g.fingerprints == {}
    g.save()
    [again] = plan_groups(tmp_path, decls, 32, lambda n: False, {"a0": "x", "a1": "y"}.get)
    assert again.gid == g.gid


def test_a_group_whose_member_left_the_pipeline_is_abandoned(tmp_path: Path) -> None:
    decls = [decl("a0"), decl("a1"), decl("a2")]
    [g] = plan_groups(tmp_path, decls, 32, lambda n: False)
    g.save()
    why: dict[str, str] = {}
    # a2 removed from the pipeline: the union without it is another plan
    assert plan_groups(tmp_path, decls[:2], 32, lambda n: False, abandoned=why) == []
    assert set(why) == {"a0", "a1"} and "a2 is no longer a shareable store of the pipeline" in why["a1"]
    assert not g.checkpoint.exists()
    # the next start: the rebuilt stores have checkpoints of their own by then and keep their own queries
    assert plan_groups(tmp_path, decls[:2], 32, lambda n: True) == []
