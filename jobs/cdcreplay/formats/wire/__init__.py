"""Wire readers: bytes and text into the structures a vendor module reads -- Avro framings and writer schemas, JSON
objects (strict where the changelog needs it, or read as Spark's ``from_json`` reads them), MongoDB shell syntax, and
the plumbing of Spark's own JSON reader for the native paths."""
