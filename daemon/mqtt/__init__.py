"""The MQTT bridge that splits the daemon into a feeds process and evaluators.

Owns the bridge and its connection (:mod:`.bridge`), its egress from the bus to the broker
(:mod:`.egress`) and its ingress from the broker to the bus (:mod:`.ingress`), the wire format of
its messages (:mod:`.wire`) and the ``[mqtt]`` settings (:mod:`.settings`).

May import: the ground, feeds, agents and scoring.
"""
