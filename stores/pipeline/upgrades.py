"""Starting the rebuild of a store whose definition changed (issue 20 items 3-4), for the Spark runtime.

The store's old version keeps answering under its name with its own files
and positions (its query does not run: its DataFrame is gone with the old
pipeline file), while the unit's query — the new definition — replays the
source from the start into a new generation with its own checkpoint
(``app.generations``). The swap target is the *highest* position any old
partition reached (merged with the old checkpoint's last committed offsets),
so no partition a client read before the swap goes back in time after it.

Before any of that the source is asked whether it still holds offset 0 of
every partition the rebuild reads. If not (Kafka retention, DeleteRecords,
the embedded log's ``delete_records``) the rebuild is refused with
REBUILD_REFUSED naming each topic-partition and the offsets gone: the old
version keeps answering, health says why, and the other stores go on. With
the explicit override (``rebuild_from_available``) the store is rebuilt from
what the source holds and ``store.json`` records it as partial history.
"""

from __future__ import annotations

import logging
import shutil
from typing import Any

from ..app import layout
from ..app.upgrade import missing_history, partial_history, refusal_message
from .materializer import last_committed_batch, position_from_offsets, read_batch_offsets

__all__ = ["begin_upgrade"]

log = logging.getLogger(__name__)


def begin_upgrade(runtime: Any, unit: Any) -> bool:
    """Start the unit's store rebuild if its definition changed; False when it is refused (nothing to run)."""
    app = runtime.app
    change = app.upgrades.pending.get(unit.name)
    if change is None or unit.building is not None or change.new_spec is None:
        return True
    source = runtime.topology.log
    missing = missing_history(source, change.new_spec.source_topics)
    if missing:
        if not app.upgrades.allows_partial(unit.name):
            msg = refusal_message(unit.name, missing, source.describe())
            app.upgrades.refused[unit.name] = msg
            log.error("stream-client %s: %s", app.application_id, msg)
            app.health.set(unit.name, "failed", msg)
            return False
        app.upgrades.partial[unit.name] = partial_history(missing)
        log.warning("stream-client %s: store %s is rebuilt from what its source still holds (--rebuild-from-"
                    "available): its answers miss the records before %s", app.application_id, unit.name, missing)
    old_gen = app.current_generation(unit.name)
    target = app.max_position(unit.name)
    ck = layout.checkpoint_dir(runtime.state_dir, unit.name, old_gen)
    committed = last_committed_batch(ck)
    if committed is not None:
        try:
            target = target.merge(position_from_offsets(read_batch_offsets(ck, committed)[0]))
        except (OSError, ValueError) as exc:
            log.warning("store %s: cannot read the old checkpoint's last offsets (%s)", unit.name, exc)
    reason = (f"its definition changed ({'; '.join(change.what)}); the old version answers until the new one "
              "has caught up with it")
    if unit.name in app.upgrades.partial:
        reason += " (rebuilt from the records the source still holds: partial history)"
    runtime._detach(unit)  # never a member of a shared query: its new plan is not the group's checkpointed one
    g = app.begin_rebuild(unit.name, reason, spec=change.new_spec)
    shutil.rmtree(layout.checkpoint_dir(runtime.state_dir, unit.name, g), ignore_errors=True)
    runtime._writers.begin(unit.name, g)  # its changelog starts over with its checkpoint
    unit.generation = old_gen
    unit.building, unit.rebuild_target, unit.rebuild_reason = g, target, reason
    return True
