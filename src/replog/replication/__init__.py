"""How partitions change hands across brokers: the leadership state machine and its driver,
leaderElection, ISR upkeep, the follower fetcher, the state-change
queues and the topic settings followed from the store."""
