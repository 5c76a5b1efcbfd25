"""One partition's replicated state on this broker: Partition (HW, ISR, the commit queue for
acks=all, fetch waiters), producer state, and the ReplicaManager (startReplica, closeReplica)."""
