"""Value codecs: a vendor's value (with its declared type) into canonical text and a Spark type -- Kafka Connect and
Debezium values, DTS Avro unions, BSON and Extended JSON, Spark's text casts in plain Python, configured column
types."""
