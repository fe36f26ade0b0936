"""Calls Bedrock Runtime's ConverseStream with boto3 (PyPI `boto3`, AWS's own Python SDK) and reports
what it read, to check the Bedrock stand-in (`tests/support/bedrock_server.rs`) against AWS's client.

stdin: {"endpoint_url": "...", "region": "...", "requests": [kwargs, ...]}, each kwargs what
`client.converse_stream(**kwargs)` takes (`modelId`, `messages`, ...). boto3 validates them against
the service model, signs with SigV4 (dummy credentials) and sends each once (no retries).

stdout: a JSON list with one entry per request:
  {"status": 200, "events": [{event_type: payload}, ...]} for a stream read to its end;
  {"status": 200, "events": [...], "stream_error": {"code", "message"}} when an exception frame
    ended it (boto3's `EventStreamError`), with the events read before it;
  {"error": {"code", "message", "status"}} when the call failed before any stream (`ClientError`).
"""

import json
import os
import sys

import boto3
import botocore.config
from botocore.exceptions import ClientError, EventStreamError


def read(client, kwargs: dict) -> dict:
    try:
        response = client.converse_stream(**kwargs)
    except ClientError as error:
        return {
            "error": {
                "code": error.response["Error"]["Code"],
                "message": error.response["Error"]["Message"],
                "status": error.response["ResponseMetadata"]["HTTPStatusCode"],
            }
        }
    result = {"status": response["ResponseMetadata"]["HTTPStatusCode"], "events": []}
    try:
        for event in response["stream"]:
            result["events"].append(event)
    except EventStreamError as error:
        result["stream_error"] = {"code": error.response["Error"]["Code"], "message": error.response["Error"]["Message"]}
    return result


def main() -> None:
    job = json.load(sys.stdin)
    # Bedrock also accepts API keys as bearer tokens: one in the environment would replace SigV4.
    os.environ.pop("AWS_BEARER_TOKEN_BEDROCK", None)
    client = boto3.client(
        "bedrock-runtime",
        endpoint_url=job["endpoint_url"],
        region_name=job["region"],
        aws_access_key_id="AKIDSTANDIN",
        aws_secret_access_key="stand-in-secret",
        aws_session_token="stand-in-session-token",
        # One attempt: the Config's `max_attempts` counts retries (1 would retry a 429 once).
        config=botocore.config.Config(retries={"total_max_attempts": 1, "mode": "standard"}),
    )
    print(json.dumps([read(client, kwargs) for kwargs in job["requests"]]))


if __name__ == "__main__":
    main()
