"""NATS JetStream backend of the journal: the local cluster, the stream layout, leases."""
