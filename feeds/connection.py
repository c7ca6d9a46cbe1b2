"""Generic streaming-connection machinery shared by every WebSocket feed.

A :class:`StreamingSource` drives one :class:`ProtocolAdapter` (the wire protocol of one source)
over one or more WebSocket connections ("shards", at most ``max_keys_per_connection`` keys
each, one task per shard):

- connect -> ``adapter.on_open`` (auth + subscribe) -> LIVE; then read frames, decode them with
  ``adapter.decode`` and publish the events (prices with ``Bus.publish_nowait``, which never
  blocks; everything else with ``await Bus.publish``), while ``adapter.heartbeat`` and
  ``adapter.periodic`` run alongside.
- A watchdog judges health on DATA only (never on socket state or pongs): a frame is data when
  the adapter's ``decode`` names a key in ``data_keys`` (control frames such as PONG, heartbeats,
  acks and errors never do). While ``is_open(now)``: a shard that received no data frame at all
  for ``silent_after`` seconds (a frozen stream: socket open, PONGs flowing) goes STALE and is
  reconnected and resubscribed; a subscribed key without data for ``stale_after`` seconds does
  the same (per-key staleness, for quiet keys). With ``dead_after`` set, a shard with no inbound
  frame at all for that long is reconnected whatever ``is_open`` says.
- Any failure (refused, handshake error, close, stale, dead) -> BACKING_OFF for a full-jitter
  exponential delay (``adapter.backoff_penalty`` scales it, e.g. HTTP 429), then reconnect and
  resubscribe every intended key. After ``down_after`` consecutive failures the shard reports
  DOWN but keeps retrying forever. A shard's failure streak ends when data arrives.
- :meth:`StreamingSource.set_keys` changes the subscription set while running: keys are removed
  from / added to shards (filling shards with room first, then opening new shards); a connected
  shard is updated in place when the adapter implements :class:`LiveSubscription`, otherwise it
  reconnects at once (no backoff).
- ``DecodeResult.reset_keys`` names keys whose state the adapter discarded and that need a fresh
  snapshot: the machinery calls ``adapter.resubscribe(ws, keys)`` when the adapter has it,
  otherwise it reconnects the shard (through backoff).
- The aggregate state is published as a :class:`~daemon.core.events.SourceStatus` whenever it
changes:
  LIVE if every shard is live, DOWN if every shard is down, else the worst shard state, with a
  partial outage (some shards down, some not) reported as BACKING_OFF.

Nothing here raises on network or protocol errors; ``run`` returns only when stopped and
propagates cancellation after closing every socket. The contract it runs (adapter protocols,
states, counters, :class:`DecodeResult`) lives in :mod:`feeds.source_contract`.

Why one module over 500 lines: the streaming source's read loop, its data watchdog and its
reconnects share the state of every shard (keys, backoff, staleness); batching is
:mod:`feeds.frame_batch`, counts :mod:`feeds.frame_counts`, the contract
:mod:`feeds.source_contract`, backoff :mod:`feeds.backoff`.
"""

from __future__ import annotations

import asyncio
import contextlib
import operator
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal

import structlog
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from daemon.core.bus import Bus
from daemon.core.events import SourceStatus
from feeds.backoff import Backoff, BackoffPolicy
from feeds.frame_batch import FrameBatcher
from feeds.frame_counts import count_failure, count_refusals
from feeds.health import failure_is_news, short_error
from feeds.source_contract import (
    DEFAULT_WS_OPTIONS,
    ColumnDecoder,
    LiveSubscription,
    ProtocolAdapter,
    Resubscribable,
    SourceCounters,
    SourceState,
    aggregate_state,
    close_code_of,
)

__all__ = [
    "StreamingSource",
    "silence_trigger",
    "silence_worst_case",
]

log = structlog.get_logger(__name__)

_TOPIC_CLASS = operator.attrgetter("topic_class")


class _Shard:
    """One connection's worth of keys and its connection state."""

    def __init__(self, index: int, keys: list[str], backoff: Backoff) -> None:
        self.index = index
        self.keys = keys
        self.active: set[str] = set()
        self.state = SourceState.CONNECTING
        self.backoff = backoff
        self.failures = 0
        self.ws: ClientConnection | None = None
        self.task: asyncio.Task[None] | None = None
        self.dirty = asyncio.Event()
        self.retired = False
        self.restart = False
        self.reason = ""
        self.connections = 0
        self.connected_at = 0.0
        self.last_frame = 0.0
        self.silent_since = 0.0


def _always_open(_: float) -> bool:
    return True


def silence_trigger(
    silent_after: float, *, tick: float, first_backoff: float, close_timeout: float
) -> float:
    """Return the data silence after which the watchdog closes a connection.

    The reconnect attempt comes later than the check by at most one watchdog ``tick`` (the
    check that sees the silence), the close handshake (``close_timeout``) and the first
    reconnect's backoff (full jitter, at most ``first_backoff``): the trigger leaves that room,
    so that :func:`silence_worst_case` stays within ``silent_after``. A ``silent_after`` too
    short for the room triggers at half of it (and the bound does not hold).
    """
    return max(silent_after - tick - first_backoff - close_timeout, silent_after / 2)


def silence_worst_case(
    silent_after: float, *, tick: float, first_backoff: float, close_timeout: float
) -> float:
    """Return the longest time from the last data frame to the reconnect attempt."""
    trigger = silence_trigger(
        silent_after, tick=tick, first_backoff=first_backoff, close_timeout=close_timeout
    )
    return trigger + tick + first_backoff + close_timeout


class StreamingSource:
    """Run a :class:`ProtocolAdapter` over sharded, self-healing WebSocket connections."""

    def __init__(
        self,
        adapter: ProtocolAdapter,
        keys: Sequence[str],
        *,
        bus: Bus,
        now: Callable[[], float],
        stale_after: float,
        backoff: BackoffPolicy = BackoffPolicy(),  # noqa: B008 - frozen dataclass
        is_open: Callable[[float], bool] = _always_open,
        open_timeout: float = 10.0,
        dead_after: float | None = None,
        silent_after: float | None = None,
        watchdog_interval: float = 1.0,
        down_after: int = 5,
        stale_policy: Literal["any", "all"] = "any",
        name: str | None = None,
        ws_options: Mapping[str, Any] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        """Prepare the source; nothing connects before :meth:`run`.

        ``stale_policy`` "any" (default) reconnects when any subscribed key is stale; "all" only
        when every key of the shard is (for sources with many quiet keys). ``silent_after``
        reconnects a shard without any data frame for that long while ``is_open`` (the attempt
        comes within it: see :func:`silence_trigger`); None disables it. ``ws_options`` are
        extra keyword arguments for ``websockets.asyncio.client.connect``.
        """
        if adapter.max_keys_per_connection < 1:
            raise ValueError("max_keys_per_connection must be >= 1")
        self.adapter = adapter
        self.name = name or adapter.name
        self.counters = SourceCounters()
        #: Short name of the last connection failure ("connect refused"); "" while live.
        self.last_error = ""
        self.stale_after = stale_after
        self.open_timeout = open_timeout
        self.dead_after = dead_after
        self.silent_after = silent_after
        self.watchdog_interval = watchdog_interval
        self.down_after = down_after
        self.stale_policy = stale_policy
        self._bus = bus
        self._now = now
        self._is_open = is_open
        self._policy = backoff
        self._rng = rng if rng is not None else random.Random()
        self._ws_options = {**DEFAULT_WS_OPTIONS, **(ws_options or {})}
        self._silence_trigger = None if silent_after is None else silence_trigger(
            silent_after,
            tick=watchdog_interval,
            first_backoff=backoff.initial,
            close_timeout=float(self._ws_options.get("close_timeout") or 0.0),
        )
        self._keys: list[str] = list(dict.fromkeys(keys))
        self._shards: list[_Shard] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._aux: set[asyncio.Task[None]] = set()
        self._last_data: dict[str, float] = {}
        self._published: SourceState | None = None
        self._running = False
        self._stop_evt: asyncio.Event | None = None
        self._next_index = 0

    # ----------------------------------------------------------------------------- public API

    @property
    def state(self) -> SourceState:
        """Return the aggregate state over every shard."""
        return aggregate_state(s.state for s in self._shards)

    @property
    def shard_count(self) -> int:
        """Return the number of connections (planned before run, live while running)."""
        if not self._running:
            return len(self._plan(self._keys))
        return len(self._shards)

    @property
    def keys(self) -> tuple[str, ...]:
        """Return every intended key."""
        return tuple(self._keys)

    @property
    def shard_keys(self) -> list[list[str]]:
        """Return the keys of each shard."""
        if not self._running:
            return self._plan(self._keys)
        return [list(s.keys) for s in self._shards]

    @property
    def shard_states(self) -> list[SourceState]:
        """Return the state of each shard."""
        return [s.state for s in self._shards]

    def last_data(self, key: str) -> float | None:
        """Return when ``key`` last received data (or was (re)subscribed), if known."""
        return self._last_data.get(key)

    async def run(self) -> None:
        """Connect every shard and keep them healthy until stopped or cancelled."""
        if self._running:
            raise RuntimeError(f"{self.name} is already running")
        self._running = True
        self._stop_evt = asyncio.Event()
        self._shards = []
        self._published = None
        try:
            for keys in self._plan(self._keys):
                self._start_shard(keys)
            await self._publish_state()
            await self._stop_evt.wait()
        finally:
            await self._shutdown()
            self._running = False

    async def stop(self) -> None:
        """Close every connection and make :meth:`run` return."""
        await self._shutdown()
        if self._stop_evt is not None:
            self._stop_evt.set()

    def set_keys(self, keys: Sequence[str]) -> None:
        """Change the subscription set (takes effect at once on running shards)."""
        new = list(dict.fromkeys(keys))
        new_set = set(new)
        old_set = set(self._keys)
        self._keys = new
        for k in old_set - new_set:
            self._last_data.pop(k, None)
        if not self._running:
            return
        cap = self.adapter.max_keys_per_connection
        for sh in self._shards:
            kept = [k for k in sh.keys if k in new_set]
            if len(kept) != len(sh.keys):
                sh.keys[:] = kept
                sh.dirty.set()
        added = [k for k in new if k not in old_set]
        for sh in self._shards:
            if not added:
                break
            room = cap - len(sh.keys)
            if room > 0 and sh.keys:
                sh.keys.extend(added[:room])
                added = added[room:]
                sh.dirty.set()
        for i in range(0, len(added), cap):
            self._start_shard(added[i : i + cap])
        for sh in [s for s in self._shards if not s.keys]:
            self._retire(sh)
        task = asyncio.get_running_loop().create_task(self._publish_state())
        self._aux.add(task)
        task.add_done_callback(self._aux.discard)

    # ----------------------------------------------------------------------------- shards

    def _plan(self, keys: Sequence[str]) -> list[list[str]]:
        cap = self.adapter.max_keys_per_connection
        return [list(keys[i : i + cap]) for i in range(0, len(keys), cap)]

    def _start_shard(self, keys: list[str]) -> None:
        sh = _Shard(self._next_index, keys, Backoff(self._policy, rng=self._rng))
        self._next_index += 1
        self._shards.append(sh)
        task = asyncio.get_running_loop().create_task(
            self._run_shard(sh), name=f"feed-{self.name}-{sh.index}"
        )
        sh.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _retire(self, sh: _Shard) -> None:
        sh.retired = True
        if sh in self._shards:
            self._shards.remove(sh)
        if sh.ws is not None:
            self._request_close(sh, sh.ws, "retired")
        elif sh.task is not None:
            sh.task.cancel()

    async def _shutdown(self) -> None:
        tasks = list(self._tasks) + list(self._aux)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _run_shard(self, sh: _Shard) -> None:
        while not sh.retired:
            if sh.connections:
                self.counters.reconnects += 1
            sh.connections += 1
            sh.reason = ""
            sh.restart = False
            await self._set_state(sh, SourceState.CONNECTING)
            exc: BaseException | None = None
            code: int | None = None
            try:
                code = await self._connect_and_serve(sh)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # every network/protocol failure ends up here
                exc = e
                code = close_code_of(e)
            if sh.retired:
                return
            if sh.restart and exc is None:
                log.info("feed shard resubscribing", source=self.name, shard=sh.index)
                continue
            await self._back_off(sh, exc, code)

    async def _back_off(self, sh: _Shard, exc: BaseException | None, code: int | None) -> None:
        now = self._now()
        sh.backoff.maybe_reset(now)
        sh.failures += 1
        try:
            penalty = float(self.adapter.backoff_penalty(exc, code))
        except Exception as e:
            log.error("backoff_penalty failed", source=self.name, error=repr(e))
            penalty = 1.0
        delay = sh.backoff.next_delay(penalty=penalty)
        down = sh.failures >= self.down_after
        reason = sh.reason or short_error(exc) or (f"closed (code {code})" if code else "closed")
        self.last_error = reason
        # An outage does not flood the log: the health line (feeds.health) sums it up.
        (log.warning if failure_is_news(sh.failures) else log.debug)(
            "feed shard disconnected",
            source=self.name,
            shard=sh.index,
            reason=reason,
            close_code=code,
            failures=sh.failures,
            delay=round(delay, 3),
        )
        await self._set_state(sh, SourceState.DOWN if down else SourceState.BACKING_OFF)
        await asyncio.sleep(delay)

    async def _connect_and_serve(self, sh: _Shard) -> int | None:
        adapter = self.adapter
        ws = await connect(adapter.url(), open_timeout=self.open_timeout, **self._ws_options)
        sh.ws = ws
        helpers: list[asyncio.Task[None]] = []
        try:
            keys = list(sh.keys)
            sh.dirty.clear()
            async with asyncio.timeout(self.open_timeout):
                await adapter.on_open(ws, keys)
            now = self._now()
            sh.active = set(keys)
            for k in keys:
                self._last_data[k] = now
            sh.connected_at = now
            sh.last_frame = now
            sh.silent_since = now
            sh.backoff.connected(now)
            await self._set_state(sh, SourceState.LIVE)
            loop = asyncio.get_running_loop()
            for name, factory in (
                ("heartbeat", lambda: adapter.heartbeat(ws)),
                ("periodic", lambda: adapter.periodic(ws, sh.keys)),
                ("watchdog", lambda: self._watchdog(sh, ws)),
                ("control", lambda: self._control(sh, ws)),
            ):
                helpers.append(loop.create_task(self._guard(sh, ws, name, factory)))
            await self._read(sh, ws)
            return ws.close_code
        finally:
            for t in helpers:
                t.cancel()
            if helpers:
                await asyncio.gather(*helpers, return_exceptions=True)
            sh.ws = None
            sh.active = set()
            await self._close(ws)

    async def _close(self, ws: ClientConnection) -> None:
        with contextlib.suppress(Exception):
            await ws.close()

    def _request_close(self, sh: _Shard, ws: ClientConnection, reason: str) -> None:
        if not sh.reason:
            sh.reason = reason
        task = asyncio.get_running_loop().create_task(self._close(ws))
        self._aux.add(task)
        task.add_done_callback(self._aux.discard)

    async def _guard(
        self,
        sh: _Shard,
        ws: ClientConnection,
        name: str,
        factory: Callable[[], Awaitable[None]],
    ) -> None:
        try:
            await factory()
        except asyncio.CancelledError:
            raise
        except ConnectionClosed:
            return
        except Exception as exc:
            log.error(
                "feed helper failed", source=self.name, shard=sh.index, helper=name, error=repr(exc)
            )
            self._request_close(sh, ws, f"{name} failed: {exc!r}")

    async def _read(self, sh: _Shard, ws: ClientConnection) -> None:
        adapter = self.adapter  # a ColumnDecoder fills the batcher's price columns
        batcher = FrameBatcher(self._bus, prices=adapter.price_columns()
                               if isinstance(adapter, ColumnDecoder) else None)
        try:
            await self._read_frames(sh, ws, batcher)
        finally:
            batcher.close()  # what a burst left waiting is published, in order

    async def _read_frames(self, sh: _Shard, ws: ClientConnection, batcher: FrameBatcher
                           ) -> None:
        adapter = self.adapter
        counters = self.counters
        bus = self._bus
        conflating = bus.conflating
        last = self._last_data
        prices = batcher.prices
        decode_columns = adapter.decode_columns if prices is not None else None  # type: ignore[attr-defined]
        before = 0
        while True:
            try:
                frame = await ws.recv()
            except ConnectionClosed:
                return
            now = self._now()
            sh.last_frame = now
            counters.messages += 1
            counters.last_message_ts = now
            try:
                if decode_columns is not None:
                    before = len(prices)  # type: ignore[arg-type]
                    res = decode_columns(frame, now, prices)
                else:
                    res = adapter.decode(frame, now)
            except Exception as exc:
                count_failure(counters, self.name, exc)
                continue
            if res.decode_errors or res.unknown or res.rejected:
                count_refusals(counters, self.name, res, frame)
            if res.data_keys:
                counters.data_messages += 1
                counters.last_data_ts = now
                last.update(dict.fromkeys(res.data_keys, now))
                sh.silent_since = now
                sh.failures = 0
            evs = res.events
            if decode_columns is not None:
                if evs:  # prices of earlier frames, the frame's events, then its prices
                    batcher.flush(before)
                    # The frame's own prices leave the batch until its events are out: a
                    # publish may wait, and the batch's scheduled flush run meanwhile.
                    own = prices.take()  # type: ignore[union-attr]
                    for ev in evs:
                        if ev.topic_class in conflating:
                            bus.publish_batch([ev])
                        else:
                            await bus.publish(ev)
                    bus.publish_columns(own)
                elif len(prices) > before:  # type: ignore[arg-type]
                    batcher.frame_done()
            elif evs:
                if all(map(conflating.__contains__, map(_TOPIC_CLASS, evs))):
                    batcher.add(evs)  # a burst's prices: each tap runs once per burst
                else:
                    for ev in evs:
                        if ev.topic_class in conflating:
                            batcher.add([ev])
                        else:
                            batcher.flush()  # what came before is published before it
                            await bus.publish(ev)
            if res.reset_keys:
                batcher.flush()
                await self._resync(sh, ws, [k for k in res.reset_keys if k in sh.active])

    async def _resync(self, sh: _Shard, ws: ClientConnection, keys: list[str]) -> None:
        if not keys:
            return
        if isinstance(self.adapter, Resubscribable):
            now = self._now()
            for k in keys:
                self._last_data[k] = now
            try:
                await self.adapter.resubscribe(ws, keys)
            except ConnectionClosed:
                return
            except Exception as exc:
                log.error("feed resubscribe failed", source=self.name, error=repr(exc))
                self._request_close(sh, ws, "resync")
        else:
            self._request_close(sh, ws, "resync")

    async def _watchdog(self, sh: _Shard, ws: ClientConnection) -> None:
        last = self._last_data
        while True:
            await asyncio.sleep(self.watchdog_interval)
            now = self._now()
            sh.backoff.maybe_reset(now)
            if self.dead_after is not None and now - sh.last_frame > self.dead_after:
                log.warning(
                    "feed shard silent",
                    source=self.name,
                    shard=sh.index,
                    silent_s=round(now - sh.last_frame, 3),
                )
                self._request_close(sh, ws, "dead: no inbound frame")
                return
            if not sh.active:
                continue
            try:
                is_open = self._is_open(now)
            except Exception as exc:
                log.error("is_open failed", source=self.name, error=repr(exc))
                is_open = True
            if not is_open:
                sh.silent_since = now  # a closed market's quiet is not silence
                continue
            silent = now - sh.silent_since
            if self._silence_trigger is not None and silent > self._silence_trigger:
                log.warning(
                    "feed shard sent no data",
                    source=self.name,
                    shard=sh.index,
                    silent_s=round(silent, 3),
                    hint="silent_after",
                )
                await self._set_state(sh, SourceState.STALE)
                self._request_close(sh, ws, f"no data for {silent:.0f}s")
                return
            ages = [(now - last.get(k, sh.connected_at), k) for k in sh.active]
            age, key = max(ages) if self.stale_policy == "any" else min(ages)
            if age > self.stale_after:
                log.warning(
                    "feed shard stale",
                    source=self.name,
                    shard=sh.index,
                    key=key,
                    age_s=round(age, 3),
                )
                await self._set_state(sh, SourceState.STALE)
                self._request_close(sh, ws, f"stale: {key}")
                return

    async def _control(self, sh: _Shard, ws: ClientConnection) -> None:
        adapter = self.adapter
        live = isinstance(adapter, LiveSubscription)
        while True:
            await sh.dirty.wait()
            sh.dirty.clear()
            want = set(sh.keys)
            added = [k for k in sh.keys if k not in sh.active]
            removed = [k for k in sh.active if k not in want]
            if not added and not removed:
                continue
            if not live:
                sh.restart = True
                self._request_close(sh, ws, "keys changed")
                return
            if removed:
                sh.active.difference_update(removed)
                await adapter.unsubscribe(ws, removed)  # type: ignore[attr-defined]
            if added:
                now = self._now()
                for k in added:
                    self._last_data[k] = now
                sh.active.update(added)
                await adapter.subscribe(ws, added)  # type: ignore[attr-defined]
            log.info(
                "feed shard subscription changed",
                source=self.name,
                shard=sh.index,
                added=len(added),
                removed=len(removed),
            )

    # ----------------------------------------------------------------------------- status

    async def _set_state(self, sh: _Shard, state: SourceState) -> None:
        sh.state = state
        if state is SourceState.LIVE and all(s.state is SourceState.LIVE for s in self._shards):
            self.last_error = ""
        await self._publish_state()

    async def _publish_state(self) -> None:
        agg = self.state
        if agg == self._published:
            return
        self._published = agg
        now = self._now()
        n_live = sum(1 for s in self._shards if s.state is SourceState.LIVE)
        detail = f"{n_live}/{len(self._shards)} connections live"
        if agg is not SourceState.LIVE and self.last_error:
            detail += f" ({self.last_error})"
        # Reconnect attempts flap connecting <-> backing_off: debug; the health line sums up.
        quiet = agg in (SourceState.CONNECTING, SourceState.BACKING_OFF)
        (log.debug if quiet else log.info)(
            "feed state", source=self.name, state=str(agg), detail=detail
        )
        await self._bus.publish(
            SourceStatus(ts=now, recv_ts=now, source=self.name, state=str(agg), detail=detail)
        )
