"""structlog setup: JSON lines in production (not a terminal, or under systemd), console in a tty.

Secrets never reach the output:

- values of keys that name credentials (``api_key``, ``token``, ``password``...) are replaced;
- every occurrence of a registered secret is replaced, wherever it appears (messages, exception
  text, nested values). :func:`register_config_secrets` registers the values of every
  environment variable the config names (``api_key_env``, ``key_env``, ``token_env``... anywhere,
  including the free-form ``sources`` and ``alerts`` tables), literal credentials and webhook
  URLs written in the config, and credential-looking variables of the environment
  (``*_API_KEY``, ``*_TOKEN``, ``*_SECRET``...) that libraries such as LiteLLM read implicitly;
- ``token=``/``key=``/``secret=`` URL parameters are replaced;
- stdlib logging (LiteLLM, aiohttp, asyncio) is rendered by the same processors, and the
  process's stdout/stderr are wrapped so a stray ``print`` or traceback is redacted too.
"""

from __future__ import annotations

import io
import logging
import os
import re
import sys
import threading
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any, TextIO
from urllib.parse import urlsplit

import structlog

REDACTED = "[redacted]"
_secrets: set[str] = set()
_pattern: re.Pattern[str] | None = None
_lock = threading.Lock()

#: A key whose value is a credential (matched on the last ``_``-separated part of the key).
_SECRET_KEY = re.compile(
    r"(?:^|[_\-.])(?:api_?key|apikey|key|secret|secret_key|token|access_token|auth_token|"
    r"password|passwd|authorization|cookie|credentials?|private_key)$",
    re.IGNORECASE,
)
#: Environment variables that hold credentials.
_SECRET_ENV = re.compile(
    r"(?:^|_)(?:API_?KEY|KEY|KEY_ID|SECRET|SECRET_KEY|TOKEN|ACCESS_TOKEN|PASSWORD|PASSWD)$",
    re.IGNORECASE,
)
#: URL parameters and ``Bearer`` values that carry credentials.
_URL_SECRET = re.compile(
    r"((?:[?&;]|\b)(?:token|access_token|apikey|api_key|key|secret|password|sig|signature)=)"
    r"[^&\s\"'<>]+",
    re.IGNORECASE,
)
_BEARER = re.compile(r"(\bBearer\s+)[A-Za-z0-9._~+/=\-]{8,}", re.IGNORECASE)
#: Config keys whose literal value is registered as a secret (webhook URLs embed tokens).
_SECRET_LITERAL_KEY = re.compile(r"(?:^|_)(?:url|webhook|webhook_url|dsn|uri)$", re.IGNORECASE)


def register_secret(value: str | None) -> None:
    """Make sure ``value`` never appears in a log line."""
    global _pattern
    if value and len(value) >= 4 and value not in _secrets:
        with _lock:
            _secrets.add(value)
            ordered = sorted(_secrets, key=len, reverse=True)  # longest first: no partial leaks
            _pattern = re.compile("|".join(re.escape(s) for s in ordered))


def registered_secrets() -> int:
    """Return how many secret values are registered."""
    return len(_secrets)


def redact_text(text: str) -> str:
    """Replace every registered secret, URL credential parameter and bearer token in ``text``."""
    pat = _pattern
    if pat is not None:
        text = pat.sub(REDACTED, text)
    if "=" in text:
        text = _URL_SECRET.sub(r"\1" + REDACTED, text)
    if "earer" in text:
        text = _BEARER.sub(r"\1" + REDACTED, text)
    return text


def is_secret_key(key: str) -> bool:
    """Return whether a field named ``key`` holds a credential (``*_env`` names do not)."""
    return not key.lower().endswith("_env") and bool(_SECRET_KEY.search(key))


def redact_value(value: Any, key: str = "") -> Any:
    """Return ``value`` with credentials replaced, keeping its structure."""
    if key and is_secret_key(key) and value not in (None, "", 0):
        return REDACTED
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {k: redact_value(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [redact_value(v) for v in value]
    if isinstance(value, BaseException):
        return redact_text(repr(value))
    return value


def _redact(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for k, v in list(event.items()):
        if k == "event":
            event[k] = redact_text(v) if isinstance(v, str) else redact_value(v)
        elif isinstance(v, int | float | bool) or v is None:
            continue
        else:
            event[k] = redact_value(v, k)
    return event


def _env_names(node: Any) -> Iterable[str]:
    """Yield the env var names of every ``*_env`` key in a dumped config."""
    if isinstance(node, Mapping):
        for k, v in node.items():
            if str(k).lower().endswith("_env"):
                if isinstance(v, str):
                    yield v
                elif isinstance(v, list | tuple):
                    yield from (x for x in v if isinstance(x, str))
            else:
                yield from _env_names(v)
    elif isinstance(node, list | tuple):
        for item in node:
            yield from _env_names(item)


def _literals(node: Any, key: str = "", *, urls: bool = False) -> Iterable[str]:
    """Yield literal credentials (and, with ``urls``, whole URLs) written in a config table."""
    if isinstance(node, Mapping):
        for k, v in node.items():
            yield from _literals(v, str(k), urls=urls)
    elif isinstance(node, list | tuple):
        for item in node:
            yield from _literals(item, key, urls=urls)
    elif isinstance(node, str) and key:
        if is_secret_key(key) or (urls and _SECRET_LITERAL_KEY.search(key)):
            yield node
        elif "://" in node:
            password = urlsplit(node).password
            if password:
                yield password


def register_env_secrets(environ: Mapping[str, str] | None = None) -> int:
    """Register credential-looking environment variables (``*_API_KEY``, ``*_TOKEN``...)."""
    env = os.environ if environ is None else environ
    n = 0
    for name, value in env.items():
        if _SECRET_ENV.search(name) and len(value) >= 8:
            register_secret(value)
            n += 1
    return n


def register_config_secrets(config: Any) -> int:
    """Register the secrets ``config`` refers to; return how many values were registered.

    Walks the whole config (agents, ``sources``, ``alerts``...) for keys ending in ``_env`` and
    registers the values of those environment variables; registers credentials written literally
    in ``sources`` and ``alerts`` (whole webhook URLs in ``alerts``, URL passwords anywhere); and
    registers credential-looking variables of the environment.
    """
    data = config.model_dump(mode="json") if hasattr(config, "model_dump") else config
    before = len(_secrets)
    for name in _env_names(data):
        register_secret(os.environ.get(name))
    if isinstance(data, Mapping):
        # Webhook URLs often carry their token in the path or query: register them whole.
        for section, urls in (("sources", False), ("alerts", True)):
            for value in _literals(data.get(section) or {}, urls=urls):
                register_secret(value)
    register_env_secrets()
    return len(_secrets) - before


class RedactingStream(io.TextIOBase):
    """A text stream that redacts secrets from everything written to the wrapped stream."""

    def __init__(self, stream: TextIO) -> None:
        """Wrap ``stream``."""
        super().__init__()
        self.stream = stream
        self.lost_writes = 0
        """Writes dropped because the stream had gone (a closed pipe or terminal)."""

    def write(self, s: str) -> int:
        """Write ``s`` with secrets replaced; return ``len(s)``.

        A stream that has gone (the reader of a pipe exited, the terminal closed) drops the text
        instead of raising: losing log output must never stop the daemon or its clean shutdown.
        """
        try:
            self.stream.write(redact_text(s))
        except (OSError, ValueError):  # BrokenPipeError, EIO; ValueError: closed file
            self.lost_writes += 1
        return len(s)

    def writelines(self, lines: Iterable[str]) -> None:  # type: ignore[override]
        """Write every line, redacted."""
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        """Flush the wrapped stream (a stream that has gone is not an error, as in write)."""
        try:
            self.stream.flush()
        except (OSError, ValueError):
            self.lost_writes += 1

    def isatty(self) -> bool:
        """Return whether the wrapped stream is a terminal."""
        return self.stream.isatty()

    def fileno(self) -> int:
        """Return the wrapped stream's file descriptor."""
        return self.stream.fileno()

    def writable(self) -> bool:
        """Return True."""
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        """Return the wrapped stream's encoding."""
        return getattr(self.stream, "encoding", "utf-8")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def _wrap_std_streams() -> None:
    if not isinstance(sys.stderr, RedactingStream) and sys.stderr is not None:
        sys.stderr = RedactingStream(sys.stderr)  # type: ignore[assignment]
    if not isinstance(sys.stdout, RedactingStream) and sys.stdout is not None:
        sys.stdout = RedactingStream(sys.stdout)  # type: ignore[assignment]


def wants_json(fmt: str = "auto") -> bool:
    """Return whether ``fmt`` means JSON here (``auto``: under systemd or not on a terminal)."""
    if fmt != "auto":
        return fmt == "json"
    under_systemd = bool(os.environ.get("INVOCATION_ID") or os.environ.get("JOURNAL_STREAM"))
    return under_systemd or not sys.stderr.isatty()


def _stderr_logger(*_args: Any) -> structlog.PrintLogger:
    """Return a logger writing to the current ``sys.stderr`` (looked up per logger, not bound
    once, so a replaced stream, e.g. a test's capture, is never written after it is closed)."""
    return structlog.PrintLogger(sys.stderr)


def configure_logging(level: str = "info", fmt: str = "auto", *, wrap_streams: bool = True
                      ) -> None:
    """Configure structlog and stdlib logging once for the process (redacting both)."""
    as_json = wants_json(fmt)
    if wrap_streams:
        register_env_secrets()
        _wrap_std_streams()
    lvl = getattr(logging, level.upper(), logging.INFO)
    renderer: Any = (structlog.processors.JSONRenderer() if as_json
                     else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()))
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, _redact, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )
    # stdlib loggers (LiteLLM, aiohttp, asyncio...) go through the same redaction and renderer.
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name,
                           structlog.stdlib.ExtraAdder()],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info, _redact, renderer],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_paperarena", False):
            root.removeHandler(h)
    handler._paperarena = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(max(lvl, logging.WARNING))
    logging.captureWarnings(True)
