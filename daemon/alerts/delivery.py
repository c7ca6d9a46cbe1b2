"""Webhook delivery of alerts: one bounded queue and task per webhook, retries with backoff."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import structlog

from daemon.alerts.config import AlertsConfig, WebhookConfig
from daemon.alerts.kinds import SEVERITIES, Alert
from daemon.core.durations import retry_after_seconds

log = structlog.get_logger(__name__)

#: Seconds ``stop`` waits for queued alerts and deliveries before giving up on them.
STOP_GRACE = 5.0


def safe_url(url: str) -> str:
    """Return ``url`` reduced to scheme://host[:port] (webhook paths often hold secrets)."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}"


ResultHook = Callable[[str, str], None]


class WebhookNotifier:
    """Deliver alerts to one webhook from a bounded queue, with retries and backoff."""

    def __init__(self, cfg: WebhookConfig, *, index: int = 0, max_attempts: int = 5,
                 backoff_initial: float = 1.0, backoff_max: float = 60.0,
                 queue_size: int = 1000, on_result: ResultHook | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 rng: random.Random | None = None) -> None:
        """Prepare the notifier; nothing is sent before :meth:`start`."""
        self.cfg = cfg
        self.name = cfg.name or f"{cfg.kind}-{index}"
        self.max_attempts = max_attempts
        self.backoff_initial = backoff_initial
        self.backoff_max = max(backoff_max, backoff_initial)
        self._queue: deque[Alert] = deque()
        self._maxlen = queue_size
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._on_result = on_result
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self.delivered = 0
        self.failed = 0
        self.dropped = 0
        self.attempts = 0

    def wants(self, alert: Alert) -> bool:
        """Return whether this notifier takes ``alert`` (kind filter and minimum severity)."""
        if self.cfg.kinds is not None and alert.kind not in self.cfg.kinds:
            return False
        rank = {s: i for i, s in enumerate(SEVERITIES)}
        return rank.get(alert.severity, 0) >= rank[self.cfg.min_severity]

    def offer(self, alert: Alert) -> bool:
        """Queue ``alert`` without waiting; drop the oldest queued one when full."""
        if not self.wants(alert):
            return False
        if len(self._queue) >= self._maxlen:
            old = self._queue.popleft()
            self.dropped += 1
            self._result("dropped")
            log.warning("alert notification dropped (queue full)", notifier=self.name,
                        kind=old.kind, agent=old.agent, market=old.market)
        self._queue.append(alert)
        self._idle.clear()
        self._wake.set()
        return True

    def payload(self, alert: Alert) -> dict[str, Any]:
        """Return the body posted for ``alert`` in this webhook's format."""
        if self.cfg.kind == "slack":
            return {"text": alert.text()}
        if self.cfg.kind == "discord":
            return {"content": alert.text()[:2000]}
        return alert.to_json()

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "User-Agent": "paperarena-alerts"}
        if self.cfg.token_env:
            token = os.environ.get(self.cfg.token_env)
            if token:
                headers["Authorization"] = f"Bearer {token}"
        return headers

    async def start(self) -> None:
        """Open the HTTP session and start the delivery task."""
        if self.cfg.token_env:
            from daemon.core.logs import register_secret

            token = os.environ.get(self.cfg.token_env)
            register_secret(token)
            if not token:
                log.warning("alert webhook token variable is not set", notifier=self.name,
                            token_env=self.cfg.token_env)
        if self._session is None:
            self._session = aiohttp.ClientSession()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"alerts-{self.name}")

    async def wait_idle(self) -> None:
        """Wait until every queued alert was delivered or given up."""
        await self._idle.wait()

    async def stop(self, grace: float = STOP_GRACE) -> None:
        """Let queued deliveries finish within ``grace`` seconds, then stop."""
        if self._task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wait_idle(), grace)
            if self._queue:
                log.warning("alert notifications abandoned at shutdown", notifier=self.name,
                            pending=len(self._queue))
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _run(self) -> None:
        while True:
            if not self._queue:
                self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            alert = self._queue[0]
            try:
                ok = await self.deliver(alert)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # never let one alert kill the notifier
                ok = False
                log.error("alert delivery crashed", notifier=self.name, error=repr(exc))
            if self._queue and self._queue[0] is alert:
                self._queue.popleft()
            if ok:
                self.delivered += 1
                self._result("delivered")
            else:
                self.failed += 1
                self._result("failed")

    def backoff(self, attempt: int) -> float:
        """Return the wait after failed attempt ``attempt`` (exponential, jittered, capped)."""
        base = min(self.backoff_max, self.backoff_initial * 2.0 ** (attempt - 1))
        return base * (0.5 + 0.5 * self._rng.random())

    async def deliver(self, alert: Alert) -> bool:
        """POST ``alert`` with retries; return whether the webhook accepted it."""
        if self._session is None:
            self._session = aiohttp.ClientSession()
        body = self.payload(alert)
        timeout = aiohttp.ClientTimeout(total=self.cfg.timeout)
        where = safe_url(self.cfg.url)
        for attempt in range(1, self.max_attempts + 1):
            self.attempts += 1
            retry_after: float | None = None
            try:
                async with self._session.post(self.cfg.url, json=body, headers=self._headers(),
                                              timeout=timeout) as resp:
                    status = resp.status
                    if 200 <= status < 300:
                        log.info("alert delivered", notifier=self.name, kind=alert.kind,
                                 agent=alert.agent, market=alert.market, attempt=attempt)
                        return True
                    if status not in (408, 425, 429) and status < 500:
                        log.error("alert refused by webhook", notifier=self.name, host=where,
                                  status=status, kind=alert.kind)
                        return False
                    retry_after = retry_after_seconds(resp.headers.get("Retry-After"))
                    problem = f"HTTP {status}"
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                problem = type(exc).__name__
            if attempt == self.max_attempts:
                log.error("alert delivery failed", notifier=self.name, host=where,
                          kind=alert.kind, attempts=attempt, error=problem)
                return False
            delay = self.backoff(attempt)
            if retry_after is not None:
                delay = min(self.backoff_max, max(delay, retry_after))
            self._result("retried")
            log.warning("alert delivery retry", notifier=self.name, host=where, kind=alert.kind,
                        attempt=attempt, error=problem, retry_in_s=round(delay, 3))
            await self._sleep(delay)
        return False

    def _result(self, result: str) -> None:
        if self._on_result is not None:
            self._on_result(self.name, result)


def build_notifiers(cfg: AlertsConfig, on_result: ResultHook | None = None
                    ) -> list[WebhookNotifier]:
    """Return one notifier per configured webhook."""
    return [
        WebhookNotifier(w, index=i, max_attempts=cfg.max_attempts,
                        backoff_initial=cfg.backoff_initial, backoff_max=cfg.backoff_max,
                        queue_size=cfg.queue_size, on_result=on_result)
        for i, w in enumerate(cfg.webhooks)
    ]

