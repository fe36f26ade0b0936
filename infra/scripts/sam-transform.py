"""Prints template.yaml as AWS will read it: SAM's own transform (aws-sam-translator, offline).

Usage: sam-transform.py TEMPLATE > transformed.json. The route test (tests/template) reads the
output: which function each REST route reaches, streamed or not (make template-check).
"""

import json
import logging
import os
import sys

from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse


class NoManagedPolicies:
    """The template names managed policies by ARN only, so none is looked up in IAM (offline)."""

    def load(self):
        return {}


def main(path):
    logging.disable(logging.WARNING)  # the translator's notes on feature toggles
    with open(path, encoding="utf-8") as template:
        sam = yaml_parse(template.read())
    # The code is local until sam build uploads it; the transform only checks it names S3 (as
    # sam validate does).
    for resource in sam.get("Resources", {}).values():
        if resource.get("Type") == "AWS::Serverless::Function":
            resource.setdefault("Properties", {})["CodeUri"] = "s3://bucket/code.zip"
    # The translator reads the region from the environment (as sam validate does offline).
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    parameters = {"AWS::Region": "us-east-1", "AWS::Partition": "aws", "AWS::AccountId": "123456789012"}
    transformed = transform(sam, parameters, NoManagedPolicies())
    json.dump(transformed, sys.stdout, indent=1, sort_keys=True, default=str)


if __name__ == "__main__":
    main(sys.argv[1])
