"""Envelope semantics shared by several wires or decoders of one vendor: Debezium's change events, Qlik's data and
metadata messages, Canal's row layout, MongoDB update documents."""
