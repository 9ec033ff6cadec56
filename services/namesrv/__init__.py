"""Quiver name server: brokers register here; clients ask it for routes (memory only). With
--controller it also runs the failover controller, whose Raft state lives in --data-dir."""
