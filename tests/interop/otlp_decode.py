"""Decodes an OTLP/HTTP trace export with OpenTelemetry's official protobuf definitions (PyPI
`opentelemetry-proto`): the bytes must parse as `ExportTraceServiceRequest`, with nothing the
definitions do not know.

stdin: the request body, base64-encoded.
stdout: {"resource": {...}, "scopes": [{"name", "version", "schema_url", "spans": [...]}]}, each
span with hex ids, its name, kind and status names, times, flags and attributes as JSON values.
"""

import base64
import json
import sys

from google.protobuf.unknown_fields import UnknownFieldSet
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status


def value(any_value):
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value(item) for item in any_value.array_value.values]
    if kind is None:
        return None
    return getattr(any_value, kind)


def attributes(pairs):
    return {pair.key: value(pair.value) for pair in pairs}


def main():
    body = base64.b64decode(sys.stdin.read())
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    out = {"resource": {}, "scopes": []}
    for resource_spans in request.resource_spans:
        out["resource"] = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            spans = []
            for span in scope_spans.spans:
                # A field the definitions do not know would be kept aside: there must be none.
                if len(UnknownFieldSet(span)) or len(UnknownFieldSet(span.status)):
                    raise SystemExit(f"span {span.name} has fields the definitions do not know")
                spans.append({
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex() or None,
                    "name": span.name,
                    "kind": Span.SpanKind.Name(span.kind),
                    "start": span.start_time_unix_nano,
                    "end": span.end_time_unix_nano,
                    "flags": span.flags,
                    "status": Status.StatusCode.Name(span.status.code),
                    "status_message": span.status.message,
                    "attributes": attributes(span.attributes),
                })
            out["scopes"].append({
                "name": scope_spans.scope.name,
                "version": scope_spans.scope.version,
                "schema_url": scope_spans.schema_url,
                "spans": spans,
            })
    json.dump(out, sys.stdout)


main()
