"""Define the MQTT bridge settings: broker, topic selection, buffer bounds, backoff."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from daemon.mqtt.wire import _NAME_UNSAFE


class MqttSettings(BaseModel):
    """Broker connection, topic selection, buffer bounds and reconnect backoff of the bridge."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=1883, ge=1, le=65535)
    namespace: str = Field(default="default", min_length=1)
    client_id: str | None = Field(
        default=None, description="stable MQTT client id; default: namespace + hostname + process"
    )
    username: str | None = None
    password_env: str | None = Field(
        default=None, description="name of the environment variable holding the password"
    )
    tls: bool = False
    ca_file: str | None = None
    keepalive: int = Field(default=30, ge=1, le=65535)
    publish_patterns: tuple[str, ...] = Field(
        default=("#",), description="local bus topics sent to the broker (bus pattern syntax)"
    )
    subscribe_patterns: tuple[str, ...] = Field(
        default=("#",), description="remote topics received from the broker (bus pattern syntax)"
    )
    egress_queue: int = Field(default=100_000, ge=1)
    dedupe_window: int = Field(default=100_000, ge=1)
    reconnect_initial: float = Field(default=0.5, gt=0)
    reconnect_max: float = Field(default=30.0, gt=0)
    process_id: str | None = Field(
        default=None,
        description="this process's stable id (status topic, envelope origin); default: derived"
        " from the role, the hostname and the database (daemon/app/roles.py)",
    )

    @field_validator("process_id")
    @classmethod
    def _check_process_id(cls, value: str | None) -> str | None:
        if value is not None and (not value or _NAME_UNSAFE.search(value)):
            raise ValueError("process_id must be non-empty without '/', '+', '#' or NUL")
        return value

    @field_validator("namespace")
    @classmethod
    def _check_namespace(cls, value: str) -> str:
        if _NAME_UNSAFE.search(value):
            raise ValueError("namespace must not contain '/', '+', '#' or NUL")
        return value

    @field_validator("publish_patterns", "subscribe_patterns")
    @classmethod
    def _check_patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            levels = pattern.split(".")
            if not pattern or "/" in pattern or "#" in levels[:-1]:
                raise ValueError(f"invalid bus pattern {pattern!r} ('#' only last, no '/')")
            if any(("+" in lv or "#" in lv) and lv not in ("+", "#") for lv in levels):
                raise ValueError(f"invalid bus pattern {pattern!r} (wildcards fill a level)")
        return value

    @model_validator(mode="after")
    def _check_backoff(self) -> MqttSettings:
        if self.reconnect_max < self.reconnect_initial:
            raise ValueError("reconnect_max must be >= reconnect_initial")
        return self
