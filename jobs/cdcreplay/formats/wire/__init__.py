"""Wire readers: bytes and text into the structures a vendor module reads -- Avro framings and writer schemas, JSON
objects (``json_reader``: the Python decoders' one reader, each JSON format declaring its strictness), MongoDB shell
syntax, and the plumbing of Spark's own JSON reader for the native paths."""
