"""Checkpoints: the kernel's resumable state per (workflow, step), with revisions.

A checkpoint is an opaque string (usually JSON) stored in a Redis hash with a
monotonically increasing ``rev``. A save may name the revision it was based on
(``expected_rev``); if someone saved in between, the save is refused with
:class:`~jarvismem.errors.CheckpointConflictError` instead of silently
overwriting their state. Without ``expected_rev`` the save is last-writer-wins,
as in the reference API.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from jarvismem.errors import CheckpointConflictError, InvalidPayloadError, PayloadTooLargeError
from jarvismem.keys import KeySpace

# KEYS: checkpoint hash. ARGV: state, expected rev ("" = unconditional), ts, ttl.
# Returns {1, new_rev} on success, {0, current_rev} on a stale expected rev.
_SAVE_LUA = """
local rev = tonumber(redis.call('HGET', KEYS[1], 'rev') or '0')
if ARGV[2] ~= '' and tonumber(ARGV[2]) ~= rev then
  return {0, rev}
end
rev = rev + 1
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'rev', rev, 'ts', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return {1, rev}
"""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A stored checkpoint: its state, revision and save time (epoch seconds)."""

    state: str
    rev: int
    ts: float


def validate_checkpoint(state: object, max_bytes: int) -> str:
    """The state as a str, or a specific error before anything is written."""
    if not isinstance(state, str):
        raise InvalidPayloadError(
            f"checkpoint state must be a str (e.g. json.dumps(state)), got {type(state).__name__}"
        )
    size = len(state.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise PayloadTooLargeError(
            f"checkpoint is {size} bytes; MAX_CHECKPOINT_BYTES is {max_bytes}"
        )
    try:
        state.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidPayloadError("checkpoint state contains unpaired surrogates") from None
    return state


class CheckpointStore:
    """Save and load one step's checkpoint."""

    def __init__(
        self,
        redis: Any,
        keyspace: KeySpace,
        workflow_id: str,
        step_id: str,
        *,
        ttl_seconds: int,
        max_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        self.redis = redis
        self.key = keyspace.checkpoint(workflow_id, step_id)
        self.ttl_seconds = ttl_seconds
        self.max_bytes = max_bytes
        self._script = redis.register_script(_SAVE_LUA)

    async def save(
        self, state: str, *, expected_rev: int | None = None, ts: float | None = None
    ) -> int:
        """Store ``state``; returns the new revision.

        Raises :class:`CheckpointConflictError` when ``expected_rev`` is given and
        is not the stored revision (nothing is written then).
        """
        validate_checkpoint(state, self.max_bytes)
        return await self.save_validated(state, expected_rev=expected_rev, ts=ts)

    async def save_validated(
        self, state: str, *, expected_rev: int | None = None, ts: float | None = None
    ) -> int:
        """:meth:`save` for a state already validated (outbox replay)."""
        reply = await self._script(
            keys=[self.key],
            args=[
                state,
                "" if expected_rev is None else str(expected_rev),
                repr(time.time() if ts is None else ts),
                self.ttl_seconds,
            ],
        )
        ok, rev = int(reply[0]), int(reply[1])
        if not ok:
            raise CheckpointConflictError(
                f"stale checkpoint revision: expected {expected_rev}, stored {rev}",
                expected=expected_rev,
                actual=rev,
            )
        return rev

    async def load(self) -> Checkpoint | None:
        """The stored checkpoint, or None."""
        raw = await self.redis.hmget(self.key, ["state", "rev", "ts"])
        state, rev, ts = raw
        if state is None:
            return None
        return Checkpoint(
            state=state.decode("utf-8") if isinstance(state, bytes) else str(state),
            rev=int(rev or 0),
            ts=float(ts or 0.0),
        )
