"""RIP-44 controller mode, broker side: identity (controller-assigned broker id), pure role/lease rules, the link
to the controllers, the ReplicasManager service and its wire handlers. Design: docs/design/controller-broker.md.
"""
