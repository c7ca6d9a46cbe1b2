"""The MQTT bridge that splits the daemon into a feeds process and evaluators.

Owns the bridge (:mod:`.bridge`), the wire format of its messages (:mod:`.wire`) and the
``[mqtt]`` settings (:mod:`.settings`).

May import: the ground, feeds, agents and scoring.
"""
