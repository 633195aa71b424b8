"""cdcreplay: replay archived Kafka CDC topics, compact them to latest-state tables, reconcile snapshots."""

__version__ = "0.1.0"
