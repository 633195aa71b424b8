"""The simulator encoders of the Alibaba formats, by format id: (encode, pipeline settings) for ``encoders.ENCODERS``.

Collected here so the shared registry takes them in one entry and imports nothing at its top for them.
"""

from __future__ import annotations

from cdcreplay_lab.simulator import encode_dataworks, encode_dts_avro, encode_shareplex

ENCODERS = {
    "dts-shareplex-json": (encode_shareplex.encode, encode_shareplex.pipeline_settings),
    "dts-avro": (encode_dts_avro.encode, encode_dts_avro.pipeline_settings),
    "dataworks-json": (encode_dataworks.encode, encode_dataworks.pipeline_settings),
}
